"""Upload -> started on an idle embedded server (issue 27: "an idle embedded server starts a job
within 0.5 s of the upload"). Starts what ``make run`` starts (``onnx-reducer serve`` with its own
``ONNX_REDUCER_HOME``: SQLite, ``LOCAL_WORKERS`` slots, each with a spare job process started
ahead, ``worker.local_child``) and uploads one small job at a time (a chain model, an
``op-present`` check), each on an idle server: the previous job ended, the job processes that
ran it gone, and every slot's spare set up (it holds the database file open and has not run since).

Per upload: ``started_at - created_at`` (both written by the server: the upload's commit and the
claim that starts the job), and the client's upload request time. Reported with the load average
(``/proc/loadavg``) at each upload, since the machine is shared.

    python bench/embedded_start_bench.py [--uploads 10] [--workers 2] [--label L]

Results go to ``bench/out/embedded_start-<label>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from embedded_overhead_bench import SPEC, Embedded  # noqa: E402
from service_parallel_bench import OUT, chain_model  # noqa: E402

TERMINAL = ("succeeded", "failed", "cancelled")
SETTLE_S = 120.0  # how long a loaded machine may take to set a spare up (a bound, not a pause)
STILL_S = 0.5  # a set-up spare, blocked on its stdin, uses no CPU tick over this


def job_processes(server_pid: int) -> dict[int, int]:
    """The server's job processes (``worker.local_child``): pid -> CPU ticks used so far."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == server_pid and b"worker.local_child" in command:
            found[int(entry.name)] = int(fields[11]) + int(fields[12])  # utime + stime
    return found


def holds_open(pid: int, path: Path) -> bool:
    folder = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(folder / fd) == str(path) for fd in os.listdir(folder))
    except OSError:
        return False


def wait_idle(server: Embedded, workers: int, used: dict[int, int]) -> dict[int, int]:
    """Waits until the job processes that ran since ``used`` was taken (their CPU ticks moved) are
    gone and each slot has a spare that holds the database open and uses no CPU over ``STILL_S``
    (set up and waiting on its stdin: a spare still compiling its warm-up would otherwise count as
    having run); returns the spares then."""
    database = server.home / "onnx-reducer.db"
    deadline = time.monotonic() + SETTLE_S
    before: dict[int, int] = {}
    seen: list[str] = []
    while time.monotonic() < deadline:
        now = job_processes(server.proc.pid)
        ran = [pid for pid, ticks in now.items() if pid in used and ticks != used[pid]]
        ready = len(now) == workers and all(holds_open(pid, database) for pid in now)
        if not ran and ready and now == before:
            return now
        seen = [f"{pid} (ran: {pid in ran}, database open: {holds_open(pid, database)})" for pid in now]
        before = now
        time.sleep(STILL_S)
    raise RuntimeError(f"the embedded server did not settle; its job processes: {', '.join(seen) or 'none'}")


def _when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def upload_once(server: Embedded, model: bytes) -> dict[str, Any]:
    load = Path("/proc/loadavg").read_text().split()[0]
    with server.client() as client:
        before = time.monotonic()
        response = client.post(
            "/v1/jobs", files={"model": ("model.onnx", model)}, data={"check_spec": SPEC, "mode": "auto"}
        )
        upload_s = time.monotonic() - before
        response.raise_for_status()
        job_id = response.json()["id"]
        while (job := client.get(f"/v1/jobs/{job_id}").json())["status"] not in TERMINAL:
            time.sleep(0.2)
    started = (_when(job["started_at"]) - _when(job["created_at"])).total_seconds()
    return {
        "job": job_id,
        "status": job["status"],
        "load": float(load),
        "upload_s": round(upload_s, 3),
        "start_s": round(started, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uploads", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2, help="LOCAL_WORKERS (the embedded default: 2)")
    parser.add_argument("--label", default="run")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="orx-embedded-start-") as tmp:
        server = Embedded(Path(tmp), args.workers)
        try:
            spares = wait_idle(server, args.workers, {})
            for upload in range(args.uploads):  # a model of its own each: no verdict is cached
                rows.append(upload_once(server, chain_model(20 + upload, 13)))
                print(rows[-1], flush=True)
                spares = wait_idle(server, args.workers, spares)
        finally:
            server.close()
            log = (Path(tmp) / "serve.log").read_text(errors="replace")
            OUT.mkdir(exist_ok=True)
            (OUT / f"embedded_start-{args.label}.log").write_text(log)
    starts = [row["start_s"] for row in rows]
    summary = {
        "uploads": len(rows),
        "median_start_s": round(statistics.median(starts), 3),
        "max_start_s": max(starts),
        "under_0_5": sum(s < 0.5 for s in starts),
        "load": f"{min(r['load'] for r in rows)}-{max(r['load'] for r in rows)}",
    }
    print(summary, flush=True)
    (OUT / f"embedded_start-{args.label}.json").write_text(json.dumps({"rows": rows, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()

"""Embedded service overhead per verdict (issue 32): the same measure as
``service_overhead_bench.py`` (the farm), on what ``make run`` starts: ``onnx-reducer serve`` with
``ONNX_REDUCER_HOME`` (SQLite, the in-process worker slots, ``LOCAL_WORKERS`` as set, default 2).
One ``linear`` job on a chain model with one culprit and an ``op-present`` check (the same cheap
work at every check; the candidates shrink as the job goes on). For each checked iteration,
overhead = (its ``finished_at`` - the previous iteration's) - its check time. Reported: the median
overhead around check 100 and around check ``--late`` (default 1,500) and their ratio (flat:
about 1), and the seconds per check (wall time between verdicts, the check included) over checks
100-400 and 1,200-1,500, as the issue measured them, and their ratio.

    python bench/embedded_overhead_bench.py [--nodes 800] [--max-checks 1600] [--late 1500]
        [--workers 2] [--label before]

Needs nothing but the venv (a throwaway home folder). Results go to
``bench/out/embedded_overhead-<label>.json``/``.md``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(BENCH))

from service_overhead_bench import overhead_summary  # noqa: E402
from service_parallel_bench import chain_model, free_port, wait_http  # noqa: E402

SPEC = "kind: op-present\nops: [Mul]\n"


class Embedded:
    """``onnx-reducer serve`` on a free port with its own home folder, and a token."""

    def __init__(self, folder: Path, workers: int) -> None:
        self.home = folder / "data"
        drop = ("DATABASE_URL", "REDIS_URL", "DATA_DIR")
        self.env = {k: v for k, v in os.environ.items() if k not in drop} | {
            "ONNX_REDUCER_HOME": str(self.home),
            "LOCAL_WORKERS": str(workers),
            "LOG_FORMAT": "text",
            "PYTHONPATH": str(ROOT),
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        }
        self.port = free_port()
        self.log = open(folder / "serve.log", "ab")  # noqa: SIM115 - closed in close()
        command = ["onnx-reducer", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(
            command, env=self.env, cwd=folder, stdout=self.log, stderr=self.log, start_new_session=True
        )
        self.url = f"http://127.0.0.1:{self.port}"
        wait_http(self.url + "/healthz", timeout=120)
        made = subprocess.run(
            ["onnx-reducer", "token", "create", "--team", "default"],
            env=self.env,
            cwd=folder,
            check=True,
            capture_output=True,
            text=True,
        )
        self.token = made.stdout.strip().splitlines()[-1]

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def run_job(server: Embedded, model: bytes, max_checks: int, timeout_s: float) -> dict[str, Any]:
    """Submit, poll every 2 s (as the issue did; cancel once ``max_checks`` verdicts are in), and
    read the iteration rows from the SQLite file."""
    samples: list[tuple[float, int]] = []
    with server.client() as client:
        response = client.post(
            "/v1/jobs", files={"model": ("model.onnx", model)}, data={"check_spec": SPEC, "mode": "linear"}
        )
        response.raise_for_status()
        job_id = response.json()["id"]
        started = time.monotonic()
        while True:
            try:
                job = client.get(f"/v1/jobs/{job_id}").json()
            except httpx.TimeoutException:  # a loaded machine: ask again
                continue
            samples.append((time.monotonic() - started, int(job["progress"]["checks_run"])))
            if job["status"] in ("succeeded", "failed", "cancelled"):
                break
            if samples[-1][1] >= max_checks or time.monotonic() - started > timeout_s:
                client.post(f"/v1/jobs/{job_id}/cancel")
            time.sleep(2.0)
    with sqlite3.connect(server.home / "onnx-reducer.db") as conn:
        rows = conn.execute(
            "SELECT number, finished_at, duration_s, cached FROM iterations "
            "WHERE job_id = ? AND NOT pending ORDER BY number",
            (job_id,),
        ).fetchall()
    return {"status": job["status"], "wall_s": round(time.monotonic() - started, 1), "rows": rows}


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(re.sub(r"\+00:00$", "", value)) if value else None


def overheads(rows: list[Any], slots: int) -> tuple[list[float], list[float]]:
    """Per checked iteration after the first: the time since the previous verdict (seconds per
    check), and the overhead: with ``slots`` checks at once each slot spends ``slots`` gaps per
    check, so overhead = ``slots`` x gap - its check time (one slot: the farm bench's measure)."""
    gaps: list[float] = []
    result: list[float] = []
    for before, row in itertools.pairwise(rows):
        earlier, later = _when(before[1]), _when(row[1])
        if row[3] or earlier is None or later is None:
            continue
        gap = (later - earlier).total_seconds()
        gaps.append(gap)
        result.append(slots * gap - (row[2] or 0.0))
    return gaps, result


def mean_over(values: list[float], first: int, last: int) -> float | None:
    """Seconds per check over checks ``first`` .. ``last`` (1-based), the check included."""
    window = values[first - 1 : last]
    return round(statistics.fmean(window), 3) if window else None


def measure(server: Embedded, args: argparse.Namespace) -> dict[str, Any]:
    culprit = args.nodes * 2 // 3
    job = run_job(server, chain_model(args.nodes, culprit), args.max_checks, args.timeout)
    gaps, values = overheads(job["rows"], args.workers)
    end = min(len(gaps), args.late)
    per_early, per_late = mean_over(gaps, 100, 400), mean_over(gaps, max(end - 300, 401), end)
    return {
        "job": f"linear {args.nodes} nodes, {args.workers} slots",
        "status": job["status"],
        **overhead_summary(values, args.late, job["wall_s"]),
        "s_per_check_100_400": per_early,
        "s_per_check_late": per_late,
        "late_window": f"{max(end - 300, 401)}-{end}",
        "per_check_late_vs_early": round(per_late / per_early, 2) if per_early and per_late else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=800)
    parser.add_argument("--max-checks", type=int, default=1600)
    parser.add_argument("--late", type=int, default=1500, help="the check the late median is taken around")
    parser.add_argument("--workers", type=int, default=2, help="LOCAL_WORKERS (the embedded default: 2)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="cancel the job after this many seconds")
    parser.add_argument("--label", default="run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orx-embedded-bench-") as tmp:
        server = Embedded(Path(tmp), args.workers)
        try:
            row = measure(server, args)
        finally:
            server.close()
    print(row, flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / f"embedded_overhead-{args.label}.json").write_text(json.dumps({"label": args.label, "row": row}, indent=2))
    keys = list(row)
    lines = [
        "| " + " | ".join(keys) + " |",
        "|" + "---|" * len(keys),
        "| " + " | ".join(str(row[k]) for k in keys) + " |",
    ]
    (OUT / f"embedded_overhead-{args.label}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

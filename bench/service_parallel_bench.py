"""One service job on 1 vs 3 Celery workers (issue 9 §3): the same single-culprit model and a check
that sleeps a fixed time (standing in for an engine build) before deciding, reduced by a farm of
PostgreSQL, Redis, the api and N Celery workers. Reports the job's wall time (started -> finished,
as the api reports it), the checks run, and the wall-time ratio against 1 worker.

    python bench/service_parallel_bench.py [--workers 1 3] [--nodes 24] [--sleep 1.0] [--mode auto]

Needs PostgreSQL (``BENCH_POSTGRES_URL``, default postgresql://postgres@127.0.0.1:5432/postgres; a
throwaway database is created and dropped) and Redis (``BENCH_REDIS_URL``, default db 3). Results
go to ``bench/out/service_parallel.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import onnx
import redis
from sqlalchemy import create_engine, text

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from persistence.db import Database, normalize_url  # noqa: E402
from persistence.migrate import upgrade  # noqa: E402
from persistence.repositories import TeamRepository  # noqa: E402
from tests.service.helpers import chain_model as chain_graph  # noqa: E402
from tests.service.helpers import free_port, wait_http  # noqa: E402

OUT = BENCH / "out"
ADMIN_URL = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/3")
WORKER = ["celery", "-A", "worker.celery_app", "worker", "-Q", "cpu", "--pool", "solo", "--concurrency", "1"]


def chain_model(length: int, culprit: int) -> bytes:
    """x -> unary ops -> Mul (the culprit) -> unary ops -> y."""
    data: bytes = chain_graph(length, mul_at=culprit).SerializeToString()
    return data


def sleepy_check(seconds: float, culprit: int) -> str:
    """Fails (exit 1) while the culprit is in the model, after sleeping ``seconds``."""
    script = f'sleep {seconds}; ! grep -q n{culprit}_Mul "$1"'
    return f"kind: command\ncommand: [sh, -c, '{script}', check, '{{model}}']\ntimeout: 600\n"


class Farm:
    """A throwaway database, the api and ``workers`` Celery workers."""

    def __init__(self, workers: int, folder: Path) -> None:
        self.name = f"orx_bench_{uuid.uuid4().hex[:10]}"
        self.admin = create_engine(normalize_url(ADMIN_URL), isolation_level="AUTOCOMMIT")
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.name}"'))
        self.url = ADMIN_URL.rsplit("/", 1)[0] + "/" + self.name
        upgrade(self.url)
        database = Database(self.url)
        with database.session() as session:
            teams = TeamRepository(session)
            self.token = teams.create_token(teams.get_or_create("bench"))
        database.dispose()
        redis.Redis.from_url(REDIS_URL).flushdb()
        data = folder / "data"
        data.mkdir()
        self.env = dict(os.environ) | {
            "DATABASE_URL": self.url,
            "REDIS_URL": REDIS_URL,
            "DATA_DIR": str(data),
            "ALLOW_COMMAND_CHECKS": "true",
            "WORKER_HEARTBEAT_S": "1",
            "LOG_FORMAT": "text",
            "PYTHONPATH": str(ROOT),
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        }
        self.port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs = folder
        api = ["onnx-reducer", "serve", "--no-local-worker", "--host", "127.0.0.1", "--port", str(self.port)]
        self._start(api, "api")
        wait_http(f"http://127.0.0.1:{self.port}/healthz", timeout=60)
        for i in range(workers):
            self._start(WORKER, f"worker-{i}")
        self._wait_workers(workers)

    def _start(self, command: list[str], name: str) -> None:
        with open(self.logs / f"{name}.log", "ab") as log:
            self.procs.append(
                subprocess.Popen(command, env=self.env, cwd=self.logs, stdout=log, stderr=log, start_new_session=True)
            )

    def _wait_workers(self, count: int) -> None:
        deadline = time.monotonic() + 180
        with self.client() as client:
            while time.monotonic() < deadline:
                if client.get("/v1/workers").json()["online"] >= count:
                    return
                time.sleep(0.5)
        raise RuntimeError(f"{count} workers did not come up")

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}", headers=headers, timeout=60)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        self.admin.dispose()


def run_job(farm: Farm, model: bytes, spec: str, mode: str) -> dict[str, Any]:
    with farm.client() as client:
        response = client.post(
            "/v1/jobs", files={"model": ("model.onnx", model)}, data={"check_spec": spec, "mode": mode}
        )
        response.raise_for_status()
        job_id = response.json()["id"]
        most = 0
        while True:
            job = client.get(f"/v1/jobs/{job_id}").json()
            most = max(most, len(job["checks_in_flight"]))
            if job["status"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.2)
    if job["status"] != "succeeded":
        raise RuntimeError(f"the job ended {job['status']}: {job['error']}")
    wall = datetime.fromisoformat(job["finished_at"]) - datetime.fromisoformat(job["started_at"])
    return {
        "wall_s": round(wall.total_seconds(), 2),
        "checks_run": job["progress"]["checks_run"],
        "nodes_after": job["nodes_after"],
        "most_in_flight": most,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--nodes", type=int, default=24)
    parser.add_argument("--sleep", type=float, default=1.0)
    parser.add_argument("--mode", default="auto")
    args = parser.parse_args()
    culprit = args.nodes * 2 // 3
    model, spec = chain_model(args.nodes, culprit), sleepy_check(args.sleep, culprit)
    onnx.checker.check_model(onnx.load_from_string(model))
    rows: list[dict[str, Any]] = []
    for count in args.workers:
        with tempfile.TemporaryDirectory(prefix="orx-parallel-bench-") as tmp:
            farm = Farm(count, Path(tmp))
            try:
                rows.append({"workers": count} | run_job(farm, model, spec, args.mode))
            finally:
                farm.close()
        print(rows[-1], flush=True)
    base = rows[0]["wall_s"]
    for row in rows:
        row["ratio_vs_first"] = round(row["wall_s"] / base, 3) if base else None
    OUT.mkdir(exist_ok=True)
    setup = {"nodes": args.nodes, "sleep_s": args.sleep, "mode": args.mode}
    (OUT / "service_parallel.json").write_text(json.dumps({"setup": setup, "rows": rows}, indent=2))
    lines = [
        "| workers | wall s | checks run | most checks in flight | nodes after | wall vs first |",
        "|---|---|---|---|---|---|",
    ]
    keys = ("workers", "wall_s", "checks_run", "most_in_flight", "nodes_after", "ratio_vs_first")
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    (OUT / "service_parallel.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Load test of one api process (not a test): N concurrent jobs and M SSE subscribers against
``onnx-reducer serve`` on 127.0.0.1 (embedded: SQLite + in-process runner, in a temporary folder),
bounded in count and time. Reports requests/s and latency percentiles of ``GET /v1/jobs/{id}``.

    python bench/load_api.py --jobs 20 --subscribers 20 --duration 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples.build_example_model import build_example_model

SPEC = "kind: op-present\nops: [Mul]\n"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _subscriber(client: httpx.AsyncClient, job_id: str, deadline: float) -> int:
    count = 0
    try:
        async with client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=deadline - time.monotonic()) as response:
            async for line in response.aiter_lines():
                count += line.startswith("id:")
                if time.monotonic() > deadline:
                    break
    except httpx.HTTPError:
        pass
    return count


async def _poller(client: httpx.AsyncClient, job_ids: list[str], deadline: float, latencies: list[float]) -> None:
    i = 0
    while time.monotonic() < deadline:
        started = time.perf_counter()
        response = await client.get(f"/v1/jobs/{job_ids[i % len(job_ids)]}")
        latencies.append(time.perf_counter() - started)
        response.raise_for_status()
        i += 1


async def _run(base: str, token: str, args: argparse.Namespace) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=args.subscribers + args.pollers + 8)
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=60) as client:
        model = build_example_model().SerializeToString()
        posts = [
            client.post("/v1/jobs", files={"model": ("m.onnx", model)}, data={"check_spec": SPEC})
            for _ in range(args.jobs)
        ]
        job_ids = [r.json()["id"] for r in await asyncio.gather(*posts)]
        deadline = time.monotonic() + args.duration
        latencies: list[float] = []
        subscribers = [_subscriber(client, job_ids[i % len(job_ids)], deadline) for i in range(args.subscribers)]
        pollers = [_poller(client, job_ids, deadline, latencies) for _ in range(args.pollers)]
        started = time.monotonic()
        results = await asyncio.gather(*subscribers, *pollers)
        elapsed = time.monotonic() - started
        statuses = [(await client.get(f"/v1/jobs/{j}")).json()["status"] for j in job_ids]
        done = statuses.count("succeeded")
    ordered = sorted(latencies)
    return {
        "jobs": args.jobs,
        "jobs_succeeded": done,
        "subscribers": args.subscribers,
        "sse_events_received": sum(r for r in results[: args.subscribers] if isinstance(r, int)),
        "get_job_requests": len(latencies),
        "get_job_rps": len(latencies) / elapsed,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[int(0.99 * (len(ordered) - 1))] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--subscribers", type=int, default=20)
    parser.add_argument("--pollers", type=int, default=8, help="concurrent GET /v1/jobs/{id} loops")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load (bounded)")
    args = parser.parse_args()
    args.jobs, args.subscribers = min(args.jobs, 500), min(args.subscribers, 500)
    args.duration = min(args.duration, 300.0)
    bin_dir = str(Path(sys.executable).parent)
    with tempfile.TemporaryDirectory(prefix="onnx-reducer-load-") as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DATA_DIR")}
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env["ONNX_REDUCER_HOME"] = tmp
        port = _free_port()
        server = subprocess.Popen(
            ["onnx-reducer", "serve", "--port", str(port)],
            cwd=tmp,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    if httpx.get(base + "/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            token = subprocess.run(
                ["onnx-reducer", "token", "create", "--team", "default"],
                cwd=tmp,
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            report = asyncio.run(_run(base, token, args))
        finally:
            server.terminate()
            server.wait(10)
    for key, value in report.items():
        print(f"{key:>22}: {value:.1f}" if isinstance(value, float) else f"{key:>22}: {value}")


if __name__ == "__main__":
    main()

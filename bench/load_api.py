"""Load test of one api process (not a test). Starts ``onnx-reducer serve`` on 127.0.0.1 in a
temporary folder, keeps ``--jobs`` reductions running and ``--subscribers`` SSE streams open, and
sends ``GET /v1/jobs/{id}`` at a fixed, open-loop rate: request *i* is due at ``i / rate`` seconds
whether or not earlier ones were answered, and its latency counts from when it was due (so a
stalled server shows up as latency instead of as fewer requests). Reports the achieved rate,
p50/p95/p99/max latency, errors and 503s (shed load), and the server's resident memory.

    python bench/load_api.py --rate 200 --duration 30                       # embedded (SQLite, in-process runner)
    python bench/load_api.py --mode distributed --rate 200 --duration 30    # PostgreSQL + Redis + a Celery worker
    python bench/load_api.py --intake-nodes 1000000                         # /healthz while a big model is validated

``--mode distributed`` needs PostgreSQL (``--postgres``, default the local trust server) and Redis
(``--redis``); it creates and drops a database of its own. ``--bin`` runs another checkout's
``onnx-reducer`` (e.g. a baseline), which must accept the same settings.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sqlalchemy import create_engine, text

from persistence.db import normalize_url
from tests.service.helpers import free_port, wait_http

SPEC = "kind: op-present\nops: [Mul]\n"
BUSY_NODES = 400  # a chain whose linear reduction keeps the runner checking for minutes


def chain(nodes: int, mul_at: int | None = None) -> bytes:
    ops = ["Relu", "Neg", "Abs", "Sigmoid", "Tanh"]
    names = ["x", *[f"t{i}" for i in range(1, nodes)], "y"]
    made = [
        helper.make_node("Mul", [names[i], names[i]], [names[i + 1]])
        if i == mul_at
        else helper.make_node(ops[i % len(ops)], [names[i]], [names[i + 1]])
        for i in range(nodes)
    ]
    graph = helper.make_graph(
        made,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (each thread's children are listed under that thread)."""
    found, pids = [], [pid]
    while pids:
        current = pids.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                pids += [int(c) for c in task.read_text().split()]
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` alone (the api process, not its job or intake children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants, in MB."""
    total = 0
    for current in _tree(pid):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{current}/status").read_text()
            total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")), 0)
    return total / 1024


@dataclass
class Server:
    base: str
    env: dict[str, str]
    cwd: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    peak_rss_mb: float = 0.0

    def sample_rss(self) -> None:
        self.peak_rss_mb = max(self.peak_rss_mb, rss_mb(self.procs[0].pid))

    def token(self, bin_dir: str) -> str:
        command = [f"{bin_dir}/onnx-reducer", "token", "create", "--team", "load"]
        return subprocess.run(
            command, cwd=self.cwd, env=self.env, check=True, capture_output=True, text=True
        ).stdout.strip()


@contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    name = f"orx_load_{uuid.uuid4().hex[:10]}"
    admin = create_engine(normalize_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def running_server(args: argparse.Namespace, tmp: Path) -> Iterator[Server]:
    bin_dir = args.bin or str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DATA_DIR")}
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env.update(ONNX_REDUCER_HOME=str(tmp), DATA_DIR=str(tmp / "data"), LOG_FORMAT="json")
    port = free_port()
    serve = [f"{bin_dir}/onnx-reducer", "serve", "--port", str(port)]
    with contextlib.ExitStack() as stack:
        if args.mode == "distributed":
            env["DATABASE_URL"] = stack.enter_context(postgres_database(args.postgres))
            env["REDIS_URL"] = args.redis
            subprocess.run(
                [f"{bin_dir}/onnx-reducer", "db", "upgrade"], env=env, cwd=tmp, check=True, capture_output=True
            )
            serve.append("--no-local-worker")
        else:
            env["DATABASE_URL"] = f"sqlite:///{tmp / 'onnx-reducer.db'}"
        log = open(args.server_log or tmp / "server.log", "wb")  # noqa: SIM115 - closed below
        server = Server(f"http://127.0.0.1:{port}", env, tmp)
        server.procs.append(subprocess.Popen(serve, cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT))
        if args.mode == "distributed":
            worker = [
                f"{bin_dir}/celery",
                "-A",
                "worker.celery_app",
                "worker",
                "-Q",
                "cpu",
                "--pool",
                "solo",
                "--loglevel",
                "WARNING",
            ]
            server.procs.append(subprocess.Popen(worker, cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT))
        try:
            wait_http(server.base + "/healthz", timeout=60)
            yield server
        finally:
            for proc in server.procs:
                proc.terminate()
            for proc in server.procs:
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
            log.close()


@dataclass
class Sample:
    latency_s: float
    status: int  # 0: no answer (connection error, timeout)


async def _subscriber(client: httpx.AsyncClient, job_id: str, deadline: float) -> int:
    count = 0
    try:
        async with client.stream(
            "GET", f"/v1/jobs/{job_id}/events", timeout=deadline - time.monotonic() + 5
        ) as response:
            async for line in response.aiter_lines():
                count += line.startswith("id:")
                if time.monotonic() > deadline:
                    break
    except httpx.HTTPError:
        pass
    return count


class RawConnections:
    """Keep-alive HTTP/1.1 connections driven with plain asyncio streams: a request is a prebuilt
    byte string and the answer is read by its Content-Length. httpx costs ~1.5 ms of client CPU
    per request, which on a 2-core machine takes the CPU the api is being measured on; this costs
    a small fraction of that. Connections are opened as needed, up to ``limit``; beyond, requests
    wait here (their latency still counts from when they were due)."""

    def __init__(self, host: str, port: int, headers: dict[str, str], limit: int) -> None:
        self.host, self.port = host, port
        self.extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.gate = asyncio.Semaphore(limit)

    def request(self, url: str) -> bytes:
        return f"GET {url} HTTP/1.1\r\nHost: {self.host}\r\n{self.extra}\r\n".encode()

    async def get(self, request: bytes) -> int:
        async with self.gate:
            if self.idle:
                try:
                    return await self._exchange(self.idle.pop(), request)
                except (asyncio.IncompleteReadError, ConnectionError):
                    pass  # the server closed the idle connection (keep-alive timeout): a new one
            return await self._exchange(await asyncio.open_connection(self.host, self.port), request)

    async def _exchange(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: bytes) -> int:
        reader, writer = conn
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        close = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            lowered = name.lower()
            if lowered == b"content-length":
                length = int(value)
            elif lowered == b"connection" and value.strip().lower() == b"close":
                close = True
        await reader.readexactly(length)
        if close:
            writer.close()
        else:
            self.idle.append(conn)
        return status

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()


async def _one(conns: RawConnections, request: bytes, due: float, samples: list[Sample]) -> None:
    try:
        status = await asyncio.wait_for(conns.get(request), 30)
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
        print("client error", type(exc).__name__, exc, file=sys.stderr)
        status = 0
    samples.append(Sample(time.monotonic() - due, status))


async def _open_loop(
    base: str, headers: dict[str, str], urls: list[str], rate: float, duration: float, connections: int
) -> tuple[list[Sample], float]:
    """Start request i at ``start + i / rate`` (open loop), whatever happened to the earlier ones."""
    samples: list[Sample] = []
    address = httpx.URL(base)
    conns = RawConnections(address.host, address.port or 80, headers, connections)
    requests = [conns.request(url) for url in urls]
    tasks: list[asyncio.Task[None]] = []
    start = time.monotonic() + 0.5
    for i in range(int(rate * duration)):
        due = start + i / rate
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        tasks.append(asyncio.create_task(_one(conns, requests[i % len(requests)], due, samples)))
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - start
    conns.close()
    return samples, elapsed


def _client_process(
    base: str, headers: dict[str, str], urls: list[str], rate: float, duration: float, connections: int, start: float
) -> tuple[list[tuple[float, int]], float]:
    """One load process's share: its own event loop and clients (a Python client saturates a
    core well below the rates measured here)."""
    time.sleep(max(0.0, start - time.time()))
    samples, elapsed = asyncio.run(_open_loop(base, headers, urls, rate, duration, connections))
    return [(s.latency_s, s.status) for s in samples], elapsed


async def _open_loop_processes(
    base: str, headers: dict[str, str], urls: list[str], args: argparse.Namespace
) -> tuple[list[Sample], float]:
    """``--client-processes`` processes, each sending ``rate / processes`` per second, started together."""
    count = max(1, args.client_processes)
    start = time.time() + 3.0  # after every process has started
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(count, mp_context=context) as pool:
        loop = asyncio.get_running_loop()
        shares = [
            loop.run_in_executor(
                pool,
                _client_process,
                base,
                headers,
                urls,
                args.rate / count,
                args.duration,
                max(1, args.connections // count),
                start,
            )
            for _ in range(count)
        ]
        results = await asyncio.gather(*shares)
    samples = [Sample(latency, status) for part, _ in results for latency, status in part]
    return samples, max(elapsed for _, elapsed in results)


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _load(server: Server, token: str, args: argparse.Namespace) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=args.subscribers + 4)
    async with httpx.AsyncClient(base_url=server.base, headers=headers, limits=limits, timeout=60) as client:
        busy = chain(BUSY_NODES, mul_at=BUSY_NODES // 2)
        job_ids = []
        for _ in range(args.jobs):
            response = await client.post(
                "/v1/jobs", files={"model": ("m.onnx", busy)}, data={"check_spec": SPEC, "mode": "linear"}
            )
            response.raise_for_status()
            job_ids.append(response.json()["id"])
        await asyncio.sleep(args.warmup)
        deadline = time.monotonic() + args.duration + 1
        subscribers = (
            [
                asyncio.create_task(_subscriber(client, job_ids[i % len(job_ids)], deadline))
                for i in range(args.subscribers)
            ]
            if job_ids
            else []
        )
        sampler = asyncio.create_task(_sample_rss(server, deadline))
        urls = [args.path] if args.path else [f"/v1/jobs/{j}" for j in job_ids] or ["/healthz"]
        profiler = _start_profiler(server, args)
        cpu_before, load_before = cpu_seconds(server.procs[0].pid), os.getloadavg()[0]
        samples, elapsed = await _open_loop_processes(server.base, headers, urls, args)
        api_cpu = cpu_seconds(server.procs[0].pid) - cpu_before
        if profiler is not None:
            profiler.wait(60)
        events = sum(await asyncio.gather(*subscribers))
        await sampler
        statuses = [(await client.get(f"/v1/jobs/{j}")).json() for j in job_ids]
        for job in statuses:
            if job["status"] not in ("succeeded", "failed", "cancelled"):
                await client.post(f"/v1/jobs/{job['id']}/cancel")
    ok = sorted(s.latency_s * 1000 for s in samples if s.status == 200)
    every = sorted(s.latency_s * 1000 for s in samples)
    return {
        "mode": args.mode,
        "target_rate": args.rate,
        "achieved_rate": round(len(samples) / elapsed, 1),
        "requests": len(samples),
        "ok": len(ok),
        "shed_503": sum(s.status == 503 for s in samples),
        "errors": sum(s.status not in (200, 503) for s in samples),
        "p50_ms": round(_percentile(every, 0.50), 1),
        "p95_ms": round(_percentile(every, 0.95), 1),
        "p99_ms": round(_percentile(every, 0.99), 1),
        "max_ms": round(every[-1], 1) if every else None,
        "jobs_running_at_end": sum(j["status"] == "running" for j in statuses),
        "checks_during_run": sum(j["progress"]["checks_run"] for j in statuses),
        "sse_events": events,
        "server_peak_rss_mb": round(server.peak_rss_mb, 1),
        "api_cpu_ms_per_request": round(api_cpu / max(len(samples), 1) * 1000, 2),
        "api_cpu_share": round(api_cpu / elapsed, 2),
        "machine_load_avg": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }


def _start_profiler(server: Server, args: argparse.Namespace) -> subprocess.Popen[bytes] | None:
    """``--py-spy FILE``: py-spy samples the api process during the load (collapsed stacks: one
    line per stack with its sample count; ``--py-spy-format speedscope`` for a viewer)."""
    if not args.py_spy:
        return None
    command = ["py-spy", "record", "-p", str(server.procs[0].pid), "-o", args.py_spy, "-d", str(int(args.duration))]
    command += ["-f", args.py_spy_format, "-r", "200", "--nonblocking"] + (["--gil"] if args.py_spy_gil else [])
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _sample_rss(server: Server, deadline: float) -> None:
    while time.monotonic() < deadline:
        server.sample_rss()
        await asyncio.sleep(0.5)


async def _intake_stall(server: Server, token: str, nodes: int) -> dict[str, object]:
    """Poll /healthz every 50 ms while a ``nodes``-node model is uploaded and validated."""
    model = chain(nodes, mul_at=nodes // 2)
    worst, polls, done = 0.0, 0, asyncio.Event()
    async with httpx.AsyncClient(
        base_url=server.base, headers={"Authorization": f"Bearer {token}"}, timeout=600
    ) as client:

        async def upload() -> tuple[int, float]:
            started = time.monotonic()
            response = await client.post("/v1/jobs", files={"model": ("big.onnx", model)}, data={"check_spec": SPEC})
            done.set()
            return response.status_code, time.monotonic() - started

        task = asyncio.create_task(upload())
        async with httpx.AsyncClient(base_url=server.base, timeout=600) as probe:
            while not done.is_set():
                started = time.monotonic()
                await probe.get("/healthz")
                worst, polls = max(worst, time.monotonic() - started), polls + 1
                server.sample_rss()
                await asyncio.sleep(0.05)
        status, took = await task
        if status == 202:
            await client.post(f"/v1/jobs/{(await client.get('/v1/jobs')).json()['items'][0]['id']}/cancel")
    return {
        "model_nodes": nodes,
        "model_mb": round(len(model) / 2**20, 1),
        "post_status": status,
        "post_seconds": round(took, 1),
        "healthz_polls": polls,
        "healthz_worst_ms": round(worst * 1000, 1),
        "server_peak_rss_mb": round(server.peak_rss_mb, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("embedded", "distributed"), default="embedded")
    parser.add_argument("--rate", type=float, default=200.0, help="GET /v1/jobs/{id} per second (open loop)")
    parser.add_argument("--path", default="", help="poll this path instead of the jobs (/healthz: the api's floor)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of load (at most 300)")
    parser.add_argument("--jobs", type=int, default=2, help="reductions kept running during the load")
    parser.add_argument("--subscribers", type=int, default=10, help="open SSE streams")
    parser.add_argument("--connections", type=int, default=64, help="client connections for the GETs")
    parser.add_argument("--client-processes", type=int, default=1, help="processes sending the GETs")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds between submitting the jobs and the load")
    parser.add_argument("--intake-nodes", type=int, default=0, help="instead: /healthz during a model of N nodes")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--bin", default="", help="folder of the onnx-reducer to start (default: this venv)")
    parser.add_argument("--py-spy", default="", help="profile the api during the load into this file (py-spy)")
    parser.add_argument("--py-spy-gil", action="store_true", help="profile only the thread holding the GIL")
    parser.add_argument("--server-log", default="", help="write the server's log here (default: its temp folder)")
    parser.add_argument("--py-spy-format", default="raw", choices=("raw", "speedscope", "flamegraph"))
    args = parser.parse_args()
    args.duration = min(args.duration, 300.0)
    with tempfile.TemporaryDirectory(prefix="onnx-reducer-load-") as tmp, running_server(args, Path(tmp)) as server:
        token = server.token(args.bin or str(Path(sys.executable).parent))
        if args.intake_nodes:
            report = asyncio.run(_intake_stall(server, token, args.intake_nodes))
        else:
            report = asyncio.run(_load(server, token, args))
    print(json.dumps(report))


if __name__ == "__main__":
    main()

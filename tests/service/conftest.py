"""Fixtures of the service tests: a fresh PostgreSQL database per test (created and dropped here),
a Redis database flushed around each test, the api as a real HTTP server, real Celery worker
processes, and for the web page's tests the embedded service and a headless Chromium per module.
``make test`` starts PostgreSQL and Redis first when they are not running (scripts/test-services.sh)."""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis
import uvicorn
from fastapi import FastAPI
from sqlalchemy import create_engine, text

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from persistence.db import Database, normalize_url
from persistence.migrate import upgrade
from persistence.repositories import TeamRepository
from tests.service.commands import WORKER_COMMAND, api_command
from tests.service.helpers import Proc, free_port, start, wait_http, wait_job
from tests.service.web_harness import Browser, Service, embedded_service, module_browser

ADMIN_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BASE_REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/8")
METRICS_TOKEN = "test-metrics-scrape-token"  # the apis started here show per-team metrics to it
BIN = str(Path(sys.executable).parent)
EXAMPLE = build_example_model().SerializeToString()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database, dropped after the test."""
    name = f"orx_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(normalize_url(ADMIN_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def db_url(pg_url: str) -> str:
    upgrade(pg_url)
    return pg_url


def worker_redis_url(base: str, worker: str) -> str:
    """The Redis database of one pytest-xdist worker: TEST_REDIS_URL's database number plus the
    worker's index (gw0, gw1, ...), so parallel workers never flush each other's queues."""
    index = int(worker[2:]) if worker.startswith("gw") else 0
    head, _, number = base.rpartition("/")
    database = int(number or 0) + index
    if database > 15:
        raise pytest.UsageError(
            f"pytest-xdist worker {worker} needs Redis database {database}; "
            "set TEST_REDIS_URL to a lower database number or run fewer workers (-n)"
        )
    return f"{head}/{database}"


@pytest.fixture
def redis_url() -> Iterator[str]:
    url = worker_redis_url(BASE_REDIS_URL, os.environ.get("PYTEST_XDIST_WORKER", "master"))
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


@pytest.fixture
def tokens(db_url: str) -> dict[str, str]:
    database = Database(db_url)
    with database.session() as session:
        teams = TeamRepository(session)
        result = {name: teams.create_token(teams.get_or_create(name)) for name in ("team-a", "team-b")}
    database.dispose()
    return result


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def service_env(db_url: str, redis_url: str, data_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=db_url,
        REDIS_URL=redis_url,
        DATA_DIR=str(data_dir),
        JOB_LEASE_S="3",
        WORKER_HEARTBEAT_S="1",
        WORKER_POLL_S="1",
        SSE_HEARTBEAT_S="1",
        METRICS_TOKEN=METRICS_TOKEN,
        PATH=BIN + os.pathsep + env.get("PATH", ""),
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    return env


@dataclass
class Processes:
    env: dict[str, str]
    cwd: Path
    started: list[Proc] = field(default_factory=list)

    def start(self, command: list[str], name: str, env: dict[str, str] | None = None) -> Proc:
        proc = start(command, {**self.env, **(env or {})}, self.cwd, self.cwd / f"{name}-{len(self.started)}.log")
        self.started.append(proc)
        return proc

    def worker(self, command: list[str] = WORKER_COMMAND, **env: str) -> Proc:
        """A Celery worker, with ``env`` added to the service environment."""
        proc = self.start(command, "worker", env)
        proc.wait_for("ready.", timeout=60)
        return proc


@pytest.fixture
def processes(service_env: dict[str, str], tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(service_env, tmp_path)
    yield procs
    for proc in procs.started:
        proc.stop()


def start_api(processes: Processes) -> str:
    port = free_port()
    processes.start(api_command(port), "api")
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz")
    return url


@pytest.fixture
def api_url(processes: Processes) -> str:
    return start_api(processes)


@pytest.fixture
def command_api_url(processes: Processes) -> str:
    """The api with command checks allowed, as are workers started afterwards (ALLOW_COMMAND_CHECKS)."""
    processes.env["ALLOW_COMMAND_CHECKS"] = "true"
    return start_api(processes)


def scrape(base_url: str) -> str:
    """/metrics as a scrape with the metrics token sees it (every series, per team)."""
    response = httpx.get(base_url + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    response.raise_for_status()
    return response.text


def client_for(base_url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


@pytest.fixture
def serve_app() -> Iterator[Callable[[FastAPI], str]]:
    """Serve an app object over real HTTP from a thread of this process; returns its base url."""
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def serve(app: FastAPI) -> str:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        servers.append((server, thread))
        return f"http://127.0.0.1:{port}"

    yield serve
    for server, thread in servers:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def quiet_api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> str:
    """The api with command checks enabled and an enqueue that sends nothing: the test runs the
    worker's steps itself (or an idle worker finds the work by polling)."""
    settings = ApiSettings(database_url=db_url, data_dir=data_dir, allow_command_checks=True)
    return serve_app(create_app(settings, enqueue=lambda job_id, queue: None))


@pytest.fixture
def quiet_client(quiet_api: str, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    """team-a's client of ``quiet_api``."""
    with client_for(quiet_api, tokens["team-a"]) as client:
        yield client


@pytest.fixture
def client(quiet_client: httpx.Client) -> httpx.Client:
    """The tests that run the worker's steps themselves submit through ``quiet_client``; a module
    whose tests need another api (``test_web_api``, ``test_embedded_flat``, ...) defines its own."""
    return quiet_client


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    yield database
    database.dispose()


# -- the web page's tests (and others against the embedded service): one of each per test module --


@pytest.fixture(scope="module")
def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The embedded service (SQLite, in-process runner) over real HTTP, in a folder named after the module."""
    with embedded_service(tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])) as service:
        yield service


@pytest.fixture(scope="module")
def browser(service: Service) -> Iterator[Browser]:
    """Headless Chromium, started after ``service`` and closed before it."""
    with module_browser() as browser:
        yield browser


def finished_job(service: Service) -> str:
    """A succeeded job of the reference example (submitted over the API)."""
    with client_for(service.url, service.token) as client:
        job_id: str = client.post(
            "/v1/jobs", files={"model": ("model.onnx", EXAMPLE)}, data={"check_spec": "kind: op-present\nops: [Mul]"}
        ).json()["id"]
        assert wait_job(client, job_id)["status"] == "succeeded"
    return job_id

"""Event streams while Redis is down, against real PostgreSQL and a throwaway Redis server: Redis
only wakes followers up (the event rows are the truth), so a stream opened while Redis cannot be
reached, or one whose Redis goes away while it follows a job, polls the database instead and
still delivers every event up to the job's end; it is never a 200 cut short."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from tests.service.conftest import client_for
from tests.service.helpers import free_port, read_sse, submit

EXAMPLE = build_example_model().SerializeToString()


@dataclass
class RedisServer:
    process: subprocess.Popen[str]
    url: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()  # else its pipe is closed at garbage collection: a ResourceWarning


@pytest.fixture
def throwaway_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis server of this test alone (so stopping it touches nobody else's), ready when given."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (scripts/test-services.sh installs it)")
    port = free_port()
    command = [binary, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    server = RedisServer(process, f"redis://127.0.0.1:{port}/0")
    try:
        assert process.stdout is not None
        for line in process.stdout:  # until it says it is ready (or exits)
            if "Ready to accept connections" in line:
                break
        else:
            raise AssertionError("redis-server exited at start")
        yield server
    finally:
        server.stop()


def _client(
    serve_app: Callable[[FastAPI], str], db_url: str, data_dir: Path, redis_url: str, token: str
) -> httpx.Client:
    settings = ApiSettings(database_url=db_url, redis_url=redis_url, data_dir=data_dir, sse_poll_s=0.2)
    return client_for(serve_app(create_app(settings, enqueue=lambda job_id, queue: None)), token)


def test_a_stream_opened_while_redis_is_down_polls_the_database(
    serve_app: Callable[[FastAPI], str], db_url: str, data_dir: Path, tokens: dict[str, str]
) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    with _client(serve_app, db_url, data_dir, closed, tokens["team-a"]) as client:
        job_id = submit(client, EXAMPLE).json()["id"]
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        kinds = [event.kind for event in read_sse(client, f"/v1/jobs/{job_id}/events", timeout=60)]
    assert kinds[0] == "job.queued" and kinds[-1] == "job.cancelled", kinds


def test_a_stream_whose_redis_goes_away_goes_on_to_the_jobs_end(
    serve_app: Callable[[FastAPI], str],
    db_url: str,
    data_dir: Path,
    tokens: dict[str, str],
    throwaway_redis: RedisServer,
) -> None:
    with _client(serve_app, db_url, data_dir, throwaway_redis.url, tokens["team-a"]) as client:
        job_id = submit(client, EXAMPLE).json()["id"]
        events = read_sse(client, f"/v1/jobs/{job_id}/events", timeout=60)
        first = next(events)
        throwaway_redis.stop()  # Redis goes away while the stream waits on it
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        rest = [event.kind for event in events]
    assert first.kind == "job.queued"
    assert rest[-1:] == ["job.cancelled"], rest

"""Team isolation (another team's job is a 404 on every route) and cancellation of a running
check, with the api served in-process over HTTP and the embedded runner against PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from tests.service.conftest import client_for
from tests.service.helpers import submit, wait_job
from worker.context import context_from_settings
from worker.local import LocalRunner
from worker.settings import WorkerSettings

EXAMPLE = build_example_model().SerializeToString()


@pytest.fixture
def embedded_api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> Iterator[str]:
    worker = WorkerSettings(database_url=db_url, data_dir=data_dir, allow_command_checks=True, job_lease_s=5)
    runner = LocalRunner(context_from_settings(worker)).start()
    settings = ApiSettings(database_url=db_url, data_dir=data_dir, allow_command_checks=True, sse_heartbeat_s=1)
    yield serve_app(create_app(settings, enqueue=runner))
    runner.stop()


def test_another_teams_job_is_404_on_every_route(embedded_api: str, tokens: dict[str, str]) -> None:
    with client_for(embedded_api, tokens["team-a"]) as owner, client_for(embedded_api, tokens["team-b"]) as other:
        job_id = submit(owner, EXAMPLE).json()["id"]
        assert wait_job(owner, job_id)["status"] == "succeeded"
        base = f"/v1/jobs/{job_id}"
        reads = [base, f"{base}/iterations", f"{base}/events"]
        reads += [f"{base}/artifacts/{name}" for name in ("min-bad", "min-good", "original", "iteration-1")]
        for path in reads:
            assert owner.get(path).status_code == 200, path
            response = other.get(path)
            assert response.status_code == 404, path
            assert response.headers["content-type"] == "application/problem+json"
        assert other.post(f"{base}/cancel").status_code == 404
        assert other.get("/v1/jobs").json()["items"] == []
        assert [j["id"] for j in owner.get("/v1/jobs").json()["items"]] == [job_id]


def test_cancel_kills_the_running_check_within_seconds(embedded_api: str, tokens: dict[str, str]) -> None:
    spec = "kind: command\ncommand: [sleep, '300']\ntimeout: 600\n"
    with client_for(embedded_api, tokens["team-a"]) as client:
        job_id = submit(client, EXAMPLE, spec).json()["id"]
        deadline = time.monotonic() + 60
        while client.get(f"/v1/jobs/{job_id}/iterations").json()["items"] == [] and time.monotonic() < deadline:
            time.sleep(0.2)  # the original's check is now running (its pending row exists)
        started = time.monotonic()
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        job = wait_job(client, job_id, timeout=30)
        elapsed = time.monotonic() - started
        iterations = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
    assert job["status"] == "cancelled"
    assert elapsed < 10
    assert iterations == []  # the interrupted check left no pending row behind


def test_pagination_and_status_filter(embedded_api: str, tokens: dict[str, str]) -> None:
    with client_for(embedded_api, tokens["team-a"]) as client:
        ids = [submit(client, EXAMPLE).json()["id"] for _ in range(3)]
        for job_id in ids:
            wait_job(client, job_id)
        first = client.get("/v1/jobs", params={"limit": 2}).json()
        second = client.get("/v1/jobs", params={"limit": 2, "cursor": first["next_cursor"]}).json()
        succeeded = client.get("/v1/jobs", params={"status": "succeeded"}).json()["items"]
        queued = client.get("/v1/jobs", params={"status": "queued"}).json()["items"]
        metrics = httpx.get(embedded_api + "/metrics").text  # the team-neutral view: no token
    assert [j["id"] for j in first["items"] + second["items"]] == ids[::-1]
    assert second["next_cursor"] is None
    assert len(succeeded) == 3 and queued == []
    assert 'onnx_reducer_jobs{status="succeeded"} 3.0' in metrics

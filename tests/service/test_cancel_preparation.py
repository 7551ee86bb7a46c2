"""Cancelling a job while its big model is being prepared (loading a 60k-node model takes seconds
and checks no cancel flag) ends it within 2 s: the embedded server's job process ends the job and
exits, freeing the model's memory; a Celery worker ends it and goes on (``worker.cancel_watch``)."""

from __future__ import annotations

import time
from pathlib import Path

from examples.build_example_model import build_example_model
from tests.checks.processes import running
from tests.service.conftest import Processes, client_for, start_api
from tests.service.embedded import embedded_server
from tests.service.helpers import chain_model, submit, wait_job


def test_cancel_reaches_a_job_in_preparation_within_2_s(tmp_path: Path) -> None:
    model = chain_model(60_000, 30_000).SerializeToString()
    with embedded_server(tmp_path) as server:
        with client_for(server.url, server.token) as client:
            response = submit(client, model)
            assert response.status_code == 202, response.text
            job_id = response.json()["id"]
            work = tmp_path / "data" / "jobs" / job_id / "work"
            deadline = time.monotonic() + 60
            while not any(work.glob("process-*")) and time.monotonic() < deadline:
                time.sleep(0.05)  # preparation has begun: the job process made its folder
            assert any(work.glob("process-*"))
            child = int(next(work.glob("process-*")).name.split("-")[1])  # process-<pid>-<thread>
            assert child != server.proc.popen.pid  # a job process (a slot's spare took the job), not the api's
            assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "running"

            started = time.monotonic()
            assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
            while client.get(f"/v1/jobs/{job_id}").json()["status"] != "cancelled" and time.monotonic() < started + 30:
                time.sleep(0.05)
            elapsed = time.monotonic() - started
            job = client.get(f"/v1/jobs/{job_id}").json()
            iterations = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
        assert job["status"] == "cancelled"
        assert elapsed < 2.0, f"cancel took {elapsed:.1f} s"
        assert iterations == []  # it was still preparing: no check ran
        deadline = time.monotonic() + 10
        while running(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(child), "the job process (holding the model) did not exit"


def test_cancel_reaches_a_celery_workers_preparation_within_2_s(
    processes: Processes, tokens: dict[str, str], data_dir: Path
) -> None:
    """A farm worker (Celery, solo pool) keeps running; the job is ended at once all the same and
    the worker then takes the next job."""
    processes.worker()
    url = start_api(processes)
    model = chain_model(60_000, 30_000).SerializeToString()
    with client_for(url, tokens["team-a"]) as client:
        response = submit(client, model)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        work = data_dir / "jobs" / job_id / "work"
        deadline = time.monotonic() + 90
        while not any(work.glob("process-*")) and time.monotonic() < deadline:
            time.sleep(0.05)  # preparation has begun: the worker made its folder
        assert any(work.glob("process-*"))
        started = time.monotonic()
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        while client.get(f"/v1/jobs/{job_id}").json()["status"] != "cancelled" and time.monotonic() < started + 30:
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"
        assert elapsed < 2.0, f"cancel took {elapsed:.1f} s"
        assert client.get(f"/v1/jobs/{job_id}/iterations").json()["items"] == []
        after = submit(client, build_example_model().SerializeToString()).json()["id"]
        assert wait_job(client, after)["status"] == "succeeded"  # the worker goes on

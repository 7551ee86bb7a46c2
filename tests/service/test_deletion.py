"""DELETE /v1/jobs/{id} and retention: a job's rows, folder and the blobs no other job refers to
go; nothing another job shares is removed; a running job is cancelled first; the retention
settings are enforced by the workers' heartbeat (embedded here: the same loop as a farm's)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI
from sqlalchemy import create_engine, text

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from persistence.db import Database, normalize_url
from persistence.layout import DataLayout
from persistence.models import utcnow
from persistence.retention import enforce_retention
from tests.service.conftest import client_for
from tests.service.helpers import submit, wait_job
from worker.context import context_from_settings
from worker.local import LocalRunner
from worker.settings import WorkerSettings

EXAMPLE = build_example_model().SerializeToString()


def _embedded(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str], **worker: float) -> Iterator[str]:
    settings = WorkerSettings(database_url=db_url, data_dir=data_dir, allow_command_checks=True, **worker)
    runner = LocalRunner(context_from_settings(settings), settings).start()
    api = ApiSettings(database_url=db_url, data_dir=data_dir, allow_command_checks=True)
    yield serve_app(create_app(api, enqueue=runner))
    runner.stop()


@pytest.fixture
def embedded_api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> Iterator[str]:
    yield from _embedded(db_url, data_dir, serve_app, job_lease_s=5)


def _keys(db_url: str, job_id: str) -> set[str]:
    engine = create_engine(normalize_url(db_url))
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT storage_key FROM artifacts WHERE job_id = :j"), {"j": job_id}).scalars()
        keys = set(rows)
    engine.dispose()
    return keys


def _blob(data_dir: Path, key: str) -> Path:
    return data_dir / "artifacts" / key


def _age_blobs(data_dir: Path, seconds: float) -> None:
    """As if every stored blob had been stored ``seconds`` ago."""
    then = time.time() - seconds
    for path in (data_dir / "artifacts" / "sha256").glob("*/*"):
        os.utime(path, (then, then))


def test_delete_removes_only_what_no_other_job_refers_to(
    embedded_api: str, tokens: dict[str, str], db_url: str, data_dir: Path
) -> None:
    with client_for(embedded_api, tokens["team-a"]) as a, client_for(embedded_api, tokens["team-b"]) as b:
        first, second = (submit(a, EXAMPLE).json()["id"] for _ in range(2))
        other = submit(b, EXAMPLE).json()["id"]
        for client, job_id in ((a, first), (a, second), (b, other)):
            assert wait_job(client, job_id)["status"] == "succeeded"
        keys = {job_id: _keys(db_url, job_id) for job_id in (first, second, other)}
        assert keys[first] & keys[second] & keys[other]  # the uploaded model's blob, at least
        _age_blobs(data_dir, 3600)

        assert b.delete(f"/v1/jobs/{first}").status_code == 404  # another team's job
        assert a.delete(f"/v1/jobs/{first}").status_code == 204
        assert a.get(f"/v1/jobs/{first}").status_code == 404
        assert a.delete(f"/v1/jobs/{first}").status_code == 404
        assert not (data_dir / "jobs" / first).exists()
        for key in keys[second] | keys[other]:  # shared: kept
            assert _blob(data_dir, key).is_file(), key
        for key in keys[first] - keys[second] - keys[other]:
            assert not _blob(data_dir, key).exists(), key
        original = a.get(f"/v1/jobs/{second}/artifacts/original")
        assert original.status_code == 200 and original.content == EXAMPLE
        assert [job["id"] for job in a.get("/v1/jobs").json()["items"]] == [second]

        assert a.delete(f"/v1/jobs/{second}").status_code == 204
        for key in keys[other]:  # team-b's job still refers to every one of them
            assert _blob(data_dir, key).is_file(), key
        assert b.get(f"/v1/jobs/{other}/artifacts/min-bad").status_code == 200

        assert b.delete(f"/v1/jobs/{other}").status_code == 204
    for key in keys[first] | keys[second] | keys[other]:
        assert not _blob(data_dir, key).exists(), key
    assert list((data_dir / "jobs").iterdir()) == []


def test_delete_cancels_a_running_job_first(embedded_api: str, tokens: dict[str, str]) -> None:
    spec = "kind: command\ncommand: [sleep, '300']\ntimeout: 600\n"
    with client_for(embedded_api, tokens["team-a"]) as client:
        job_id = submit(client, EXAMPLE, spec).json()["id"]
        deadline = time.monotonic() + 60
        while client.get(f"/v1/jobs/{job_id}").json()["status"] != "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "running"
        response = client.delete(f"/v1/jobs/{job_id}")
        assert response.status_code == 204, response.text
        assert client.get(f"/v1/jobs/{job_id}").status_code == 404


def _finish_times(db_url: str, ages: dict[str, float]) -> None:
    engine = create_engine(normalize_url(db_url))
    with engine.begin() as conn:
        for job_id, age_s in ages.items():
            at = utcnow() - timedelta(seconds=age_s)
            conn.execute(text("UPDATE jobs SET finished_at = :at WHERE id = :j"), {"at": at, "j": job_id})
    engine.dispose()


def test_retention_by_age_and_by_team_size_keeps_shared_blobs(
    embedded_api: str, tokens: dict[str, str], db_url: str, data_dir: Path
) -> None:
    with client_for(embedded_api, tokens["team-a"]) as a:
        old, middle, new = (submit(a, EXAMPLE).json()["id"] for _ in range(3))
        for job_id in (old, middle, new):
            assert wait_job(a, job_id)["status"] == "succeeded"
    _finish_times(db_url, {old: 10 * 86400, middle: 2 * 86400, new: 60})
    _age_blobs(data_dir, 3600)
    db, layout = Database(db_url), DataLayout(data_dir.resolve())
    try:
        assert enforce_retention(db, layout, max_age_s=0, max_team_bytes=0) == []
        deleted = enforce_retention(db, layout, max_age_s=5 * 86400, max_team_bytes=0)
        assert [job.job_id for job in deleted] == [old]
        one_job = sum(_sizes(db_url, new))  # the cap holds one job's artifacts: the older of the two goes
        deleted = enforce_retention(db, layout, max_age_s=0, max_team_bytes=one_job)
        assert [job.job_id for job in deleted] == [middle]
    finally:
        db.dispose()
    with client_for(embedded_api, tokens["team-a"]) as a:
        assert [job["id"] for job in a.get("/v1/jobs").json()["items"]] == [new]
        assert a.get(f"/v1/jobs/{new}/artifacts/original").content == EXAMPLE
    for key in _keys(db_url, new):
        assert _blob(data_dir, key).is_file(), key


def _sizes(db_url: str, job_id: str) -> list[int]:
    engine = create_engine(normalize_url(db_url))
    with engine.connect() as conn:
        sizes = list(conn.execute(text("SELECT size FROM artifacts WHERE job_id = :j"), {"j": job_id}).scalars())
    engine.dispose()
    return sizes


@pytest.fixture
def retaining_api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> Iterator[str]:
    yield from _embedded(
        db_url, data_dir, serve_app, retention_max_age_s=5.0, retention_interval_s=0.2, worker_heartbeat_s=0.2
    )


def test_the_workers_heartbeat_enforces_retention(retaining_api: str, tokens: dict[str, str], data_dir: Path) -> None:
    with client_for(retaining_api, tokens["team-a"]) as a:
        job_id = submit(a, EXAMPLE).json()["id"]
        assert wait_job(a, job_id)["status"] == "succeeded"
        deadline = time.monotonic() + 60
        while a.get(f"/v1/jobs/{job_id}").status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert a.get(f"/v1/jobs/{job_id}").status_code == 404
    assert not (data_dir / "jobs" / job_id).exists()


def test_onnx_reducer_delete(embedded_api: str, tokens: dict[str, str], service_env: dict[str, str]) -> None:
    with client_for(embedded_api, tokens["team-a"]) as a:
        job_id = submit(a, EXAMPLE).json()["id"]
        assert wait_job(a, job_id)["status"] == "succeeded"
        command = ["onnx-reducer", "delete", job_id, "--server", embedded_api, "--token", tokens["team-a"]]
        deleted = subprocess.run(command, env=service_env, capture_output=True, text=True, timeout=120, check=False)
        assert deleted.returncode == 0, deleted.stderr
        assert f"job {job_id} deleted" in deleted.stderr
        assert a.get(f"/v1/jobs/{job_id}").status_code == 404
        again = subprocess.run(command, env=service_env, capture_output=True, text=True, timeout=120, check=False)
        assert again.returncode == 2, again.stderr  # no such job

"""DELETE /v1/jobs/{id} and retention: a job's rows, folder, farm verdicts and the blobs no other
job refers to go; nothing another job shares is removed, not even a blob another team's running
job stored and has not recorded yet; a running job is cancelled first; the retention settings are
enforced by the workers' heartbeat (embedded here: the same loop as a farm's), the team cap on
finished jobs only and never on one that finished within the last hour."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import create_engine, text

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from persistence.db import Database, normalize_url
from persistence.enums import EventKind
from persistence.layout import DataLayout
from persistence.models import utcnow
from persistence.repositories import EventRepository
from persistence.retention import enforce_retention
from persistence.store import ArtifactStore
from tests.service.conftest import client_for
from tests.service.helpers import chain_model, submit, tar_bundle, wait_job
from worker.context import context_from_settings
from worker.local import LocalRunner
from worker.settings import WorkerSettings
from worker.stops import ending_errors

EXAMPLE = build_example_model().SerializeToString()
BEYOND_GRACE_S = 8 * 86400  # stored longer ago than any check runs (JOB_TIME_LIMIT_S + 1 h)


def _embedded(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str], **worker: Any) -> Iterator[str]:
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
        _age_blobs(data_dir, BEYOND_GRACE_S)

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
    _age_blobs(data_dir, BEYOND_GRACE_S)
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


# -- issue 30: one team's delete never destroys another team's data --------------------------------

MODEL = chain_model(12, 7).SerializeToString()
FAST_CHECK = "kind: command\ncommand: [sh, -c, '! grep -q n7_Mul \"$1\"', check, '{model}']\ntimeout: 60\n"


def _gated_check(folder: Path) -> str:
    """FAST_CHECK's verdicts, each check first writing ``started`` and then waiting for ``gate``
    (the test opens it): a job that is in the middle of its checks for as long as the test wants."""
    script = f"touch '{folder}/started'; while [ ! -e '{folder}/gate' ]; do sleep 0.05; done; ! grep -q n7_Mul \"$1\""
    return f"kind: command\ncommand: [sh, -c, {json.dumps(script)}, check, '{{model}}']\ntimeout: 600\n"


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def _stored(data_dir: Path) -> set[str]:
    return {f"sha256/{p.parent.name}/{p.name}" for p in (data_dir / "artifacts" / "sha256").glob("*/*")}


def _rows(db_url: str, query: str, **params: str) -> list[Any]:
    engine = create_engine(normalize_url(db_url))
    with engine.connect() as conn:
        rows = list(conn.execute(text(query), params).all())
    engine.dispose()
    return rows


def test_a_delete_and_a_retention_pass_during_another_teams_checks_keep_every_blob_it_stored(
    embedded_api: str, tokens: dict[str, str], db_url: str, data_dir: Path, tmp_path: Path
) -> None:
    """The probe's R1: team A's finished jobs and team B's running job store byte-identical
    candidates (the same model, uploaded as a .onnx and as a .tar holding it: another model_sha256).
    A delete and a retention pass of A's jobs while B's check runs (its model stored, not yet
    recorded; the check has run for half an hour, far below the job time limit) leave every blob B
    stored: every artifact of B's job downloads afterwards."""
    with client_for(embedded_api, tokens["team-a"]) as a, client_for(embedded_api, tokens["team-b"]) as b:
        by_hand, by_retention = (submit(a, MODEL, FAST_CHECK).json()["id"] for _ in range(2))
        for job_id in (by_hand, by_retention):
            assert wait_job(a, job_id)["status"] == "succeeded"
        team_a_keys = _keys(db_url, by_hand) | _keys(db_url, by_retention)
        with _gate(tmp_path) as gate:
            running = submit(b, tar_bundle({"model.onnx": MODEL}), _gated_check(gate), filename="model.tar")
            running_id = running.json()["id"]
            _wait_for(gate / "started")  # its first check's model is stored, and the check runs
            in_flight = _stored(data_dir) - _keys(db_url, running_id)
            assert in_flight & team_a_keys  # stored by B's running check, recorded by A's jobs only
            _age_blobs(data_dir, 1800)  # as if B's check had run for half an hour
            assert a.delete(f"/v1/jobs/{by_hand}").status_code == 204
            _finish_times(db_url, {by_retention: 10 * 86400})
            deleted = _retention(db_url, data_dir, max_age_s=5 * 86400, max_team_bytes=0)
            assert deleted == [by_retention]
            for key in in_flight:
                assert _blob(data_dir, key).is_file(), key
        job = wait_job(b, running_id)
        assert job["status"] == "succeeded", job
        artifacts = _rows(db_url, "SELECT kind, name, sha256 FROM artifacts WHERE job_id = :j", j=running_id)
        assert {"min-good", "min-bad", "iteration-1"} <= {name for _, name, _ in artifacts}
        for kind, name, sha256 in artifacts:
            path = "bundle" if kind == "bundle" else f"artifacts/{name}"
            response = b.get(f"/v1/jobs/{running_id}/{path}")
            assert response.status_code == 200, (name, response.text)
            assert hashlib.sha256(response.content).hexdigest() == sha256, name


@contextmanager
def _gate(tmp_path: Path) -> Iterator[Path]:
    """The folder of ``_gated_check``; its gate opens when the block ends, however it ends."""
    folder = tmp_path / "gate-folder"
    folder.mkdir()
    try:
        yield folder
    finally:
        (folder / "gate").touch()


def _retention(db_url: str, data_dir: Path, max_age_s: float, max_team_bytes: int) -> list[str]:
    """One retention pass, as a worker's heartbeat runs it; the deleted jobs."""
    db, layout = Database(db_url), DataLayout(data_dir.resolve())
    try:
        deleted = enforce_retention(db, layout, max_age_s=max_age_s, max_team_bytes=max_team_bytes)
    finally:
        db.dispose()
    return [job.job_id for job in deleted]


def test_the_team_cap_counts_finished_jobs_only_and_spares_those_finished_within_the_minimum_age(
    embedded_api: str, tokens: dict[str, str], db_url: str, data_dir: Path, tmp_path: Path
) -> None:
    """R7: a team whose running job holds more than the cap keeps its finished jobs (the running
    one is not the finished ones' fault), and a job that has just finished is not deleted by the
    cap (RETENTION_MIN_AGE_S, an hour by default); once older it is."""
    with client_for(embedded_api, tokens["team-a"]) as a:
        older, recent = (submit(a, MODEL, FAST_CHECK).json()["id"] for _ in range(2))
        for job_id in (older, recent):
            assert wait_job(a, job_id)["status"] == "succeeded"
        with _gate(tmp_path) as gate:
            running = submit(a, tar_bundle({"model.onnx": MODEL}), _gated_check(gate), filename="model.tar")
            running_id = running.json()["id"]
            _wait_for(gate / "started")
            assert _keys(db_url, running_id)  # its upload is stored: the team holds more than the cap
            _finish_times(db_url, {older: 7200, recent: 10})
            finished = sum(_sizes(db_url, older)) + sum(_sizes(db_url, recent))
            assert _retention(db_url, data_dir, max_age_s=0, max_team_bytes=finished) == []
            assert _retention(db_url, data_dir, max_age_s=0, max_team_bytes=1) == [older]
            assert a.get(f"/v1/jobs/{recent}").status_code == 200  # finished 10 s ago: spared
            _finish_times(db_url, {recent: 7200})
            assert _retention(db_url, data_dir, max_age_s=0, max_team_bytes=1) == [recent]
            assert a.get(f"/v1/jobs/{running_id}").json()["status"] == "running"
        assert wait_job(a, running_id)["status"] == "succeeded"


def _verdicts(db_url: str) -> list[tuple[str | None, str]]:
    return [(job_id, team) for job_id, team in _rows(db_url, "SELECT job_id, team_id FROM farm_verdicts")]


def test_a_deleted_jobs_farm_verdicts_go_with_it_and_answer_no_later_job(
    embedded_api: str, tokens: dict[str, str], db_url: str, data_dir: Path
) -> None:
    """R10: the verdicts a job's checks shared go when the job is deleted (by hand or by
    retention); a later job of the team runs its checks again; verdicts left without their job by
    an older version are pruned by the next retention pass."""
    with client_for(embedded_api, tokens["team-a"]) as a:
        first = submit(a, MODEL, FAST_CHECK).json()["id"]
        assert wait_job(a, first)["status"] == "succeeded"
        assert {job_id for job_id, _ in _verdicts(db_url)} == {first}
        assert a.delete(f"/v1/jobs/{first}").status_code == 204
        assert _verdicts(db_url) == []

        later = submit(a, MODEL, FAST_CHECK).json()["id"]
        job = wait_job(a, later)
        assert job["status"] == "succeeded"
        assert job["progress"]["farm_cache_hits"] == 0 and job["progress"]["checks_run"] > 0
        team = _verdicts(db_url)[0][1]

        engine = create_engine(normalize_url(db_url))
        with engine.begin() as conn:  # what an older version left behind when it deleted a job
            conn.execute(
                text(
                    "INSERT INTO farm_verdicts (team_id, scope, fingerprint, verdict, job_id, created_at) "
                    "VALUES (:t, 'old-scope', 'old-fp', '{}', NULL, now())"
                ),
                {"t": team},
            )
        engine.dispose()
        _finish_times(db_url, {later: 10 * 86400})
        assert _retention(db_url, data_dir, max_age_s=86400, max_team_bytes=0) == [later]
        assert _verdicts(db_url) == []


def test_a_job_deleted_under_a_worker_is_logged_as_deleted_not_as_a_database_outage(
    db_url: str, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """R11: a worker whose job's row is gone under a statement that needs it (here: announcing an
    event of a job deleted meanwhile) says the job was deleted; the error does not reach the
    runner, which would log it as "the database is unreachable (NoResultFound)"."""
    ctx = context_from_settings(WorkerSettings(database_url=db_url, data_dir=data_dir))
    deleted = "0" * 32
    try:
        with (
            caplog.at_level(logging.INFO, "onnx_reducer.worker"),
            ending_errors(ctx, deleted),
            ctx.db.session() as session,
        ):
            EventRepository(session).append(deleted, EventKind.CHECK_STARTED, {})
    finally:
        ctx.db.dispose()
    assert f"job {deleted}: job deleted while a worker worked on it" in caplog.text
    assert "unreachable" not in caplog.text


class _StoredDuringRemoval(ArtifactStore):
    """The local store, with a job storing the blob again at the worst moment of a removal: after
    its age was read as old, before it is moved aside."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.restore: Path | None = None

    def temp_path(self, suffix: str = "") -> Path:
        if suffix == ".deleting" and self.restore is not None:
            assert self.put_file(self.restore).key  # stores content that is there: marks it stored now
        return super().temp_path(suffix)


def test_a_blob_stored_again_while_it_is_being_removed_stays(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(MODEL)
    store = _StoredDuringRemoval(tmp_path / "artifacts")
    blob = store.put_file(model)
    then = time.time() - BEYOND_GRACE_S
    os.utime(store.local_path(blob.key), (then, then))
    store.restore = model
    assert not store.delete_if_stored_before(blob.key, 3600)
    assert store.local_path(blob.key).read_bytes() == MODEL
    assert list(store.tmp_dir.iterdir()) == []
    store.restore = None
    os.utime(store.local_path(blob.key), (then, then))
    assert store.delete_if_stored_before(blob.key, 3600)  # nobody stored it: removed
    assert not store.exists(blob.key)

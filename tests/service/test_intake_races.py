"""Two uploads racing in the intake's commit (real PostgreSQL, the api over real HTTP).

The races are made with the database's own locks, nothing patched: a test transaction that holds
an uncommitted job row with an ``Idempotency-Key`` makes an upload with that key wait inside its
INSERT, after it stored its blobs and before its commit; the test lets it go on by committing or
rolling back, or by closing a circle of locks (a real deadlock)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from persistence.db import Database
from persistence.repositories import TeamRepository
from tests.service.conftest import client_for
from tests.service.helpers import OP_PRESENT_MUL, stored_job

MODEL = build_example_model().SerializeToString()
WAIT_S = 60.0
DEADLOCK_DETECTED = "40P01"


@pytest.fixture
def api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> str:
    settings = ApiSettings(database_url=db_url, data_dir=data_dir)
    return serve_app(create_app(settings, enqueue=lambda job_id, queue: None))


@contextmanager
def _holding_key(db: Database, key: str, team: str = "team-a") -> Iterator[Session]:
    """An open transaction holding an uncommitted job row of ``team`` with Idempotency-Key ``key``
    (another model): an upload with that key waits in its INSERT until this one ends. The caller
    commits; otherwise it is rolled back."""
    with Session(db.engine) as session:
        job = stored_job(session, TeamRepository(session).get_or_create(team).id)
        job.idempotency_key = key
        session.flush()
        try:
            yield session
        finally:
            session.rollback()


def _waiting_on_locks(db: Database) -> int:
    with db.session() as session:
        return int(
            session.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        )


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _upload(client: httpx.Client, key: str) -> httpx.Response:
    return client.post(
        "/v1/jobs",
        files={"model": ("model.onnx", MODEL)},
        data={"check_spec": OP_PRESENT_MUL},
        headers={"Idempotency-Key": key},
    )


def test_a_discarded_upload_leaves_the_blob_of_a_concurrent_upload_of_the_same_model(
    api: str, database: Database, tokens: dict[str, str]
) -> None:
    """B (team-b) stores the model's blob and waits in its INSERT; A (team-a), the same bytes, stores
    the blob too, then loses its Idempotency-Key to a job committed meanwhile: A is refused (422)
    and discards what it stored while B's row is not committed yet. B is accepted: its original
    downloads with the model's sha256 (before: A deleted the blob nobody referred to yet, and B's
    original answered 500)."""
    with (
        client_for(api, tokens["team-a"]) as client_a,
        client_for(api, tokens["team-b"]) as client_b,
        ThreadPoolExecutor(2) as pool,
    ):
        with _holding_key(database, "b-key", "team-b"):
            with _holding_key(database, "a-key", "team-a") as a_holder:
                b: Future[httpx.Response] = pool.submit(_upload, client_b, "b-key")
                _until(lambda: _waiting_on_locks(database) == 1, "B to wait in its INSERT")
                a: Future[httpx.Response] = pool.submit(_upload, client_a, "a-key")
                _until(lambda: _waiting_on_locks(database) == 2, "A to wait in its INSERT")
                a_holder.commit()  # A's key is taken: its INSERT fails, A discards its blobs
            refused = a.result(WAIT_S)
            assert refused.status_code == 422, refused.text
            assert "Idempotency-Key" in refused.json()["title"]
            assert not b.done()
        accepted = b.result(WAIT_S)  # B's key holder rolled back: B's INSERT goes on
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["id"]
        original = client_b.get(f"/v1/jobs/{job_id}/artifacts/original")
        assert original.status_code == 200, original.text
        assert hashlib.sha256(original.content).hexdigest() == hashlib.sha256(MODEL).hexdigest()


def test_a_submission_aborted_as_a_deadlock_is_run_again_and_accepted(
    api: str, database: Database, tokens: dict[str, str]
) -> None:
    """A real deadlock with the intake's commit: the test's transaction locks team-a's row, the
    upload inserts its job row (Idempotency-Key ``k``) and waits for that team row (its foreign key);
    the test's transaction then inserts a job with key ``k`` and so waits for the upload. PostgreSQL
    aborts the upload's transaction (the test's waits longer before it looks for deadlocks); the
    intake runs it again in place (``persistence.retry``) and, once the test's transaction is rolled
    back, the upload is accepted: 202, not the 409 of a conflict left to the client.

    PostgreSQL looks for a deadlock once per wait, ``deadlock_timeout`` (1 s) after the wait began:
    on a loaded machine the test's INSERT may come later than the upload's look, and then the test's
    transaction is the one aborted (5 s into its wait) and the upload was not: that round is run
    again with another key, until the upload is the one aborted."""
    with client_for(api, tokens["team-a"]) as client, ThreadPoolExecutor(2) as pool:
        for key in ("k", "k2", "k3", "k4", "k5"):
            upload, upload_aborted = _deadlock_round(database, client, pool, key)
            accepted = upload.result(WAIT_S)
            assert accepted.status_code == 202, accepted.text
            if upload_aborted:
                break
        else:
            pytest.fail("in 5 rounds the test's transaction, never the upload's, was aborted as a deadlock")
    with database.session() as session:
        keys = session.execute(text("SELECT idempotency_key FROM jobs WHERE idempotency_key = :k"), {"k": key})
        assert keys.scalars().all() == [key]


def _deadlock_round(
    database: Database, client: httpx.Client, pool: ThreadPoolExecutor, key: str
) -> tuple[Future[httpx.Response], bool]:
    """One try at the deadlock: the upload's future, and whether PostgreSQL aborted the upload
    (the test's INSERT went through) rather than the test's transaction."""
    with Session(database.engine) as holder:
        holder.execute(text("SET LOCAL deadlock_timeout = '5s'"))
        team_id = TeamRepository(holder).get_or_create("team-a").id
        holder.execute(text("SELECT id FROM teams WHERE id = :id FOR UPDATE"), {"id": team_id})
        upload: Future[httpx.Response] = pool.submit(_upload, client, key)
        _until(lambda: _waiting_on_locks(database) == 1, "the upload to wait for the team's row")
        job = stored_job(holder, team_id)
        job.idempotency_key = key
        try:
            holder.flush()  # waits for the upload's uncommitted key, until PostgreSQL aborts one of the two
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != DEADLOCK_DETECTED:
                raise
            return upload, False
        finally:
            holder.rollback()
    return upload, True

"""An interactive job's verdict racing its DELETE or cancel, over real HTTP against PostgreSQL: both
paths take the job's row first (one lock order: team, job, units, iterations), so PostgreSQL never
detects a deadlock between them and no answer is a 5xx (the request is never lost)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import create_engine, delete, text

from api.app import create_app
from api.problems import install_problem_handlers
from api.schemas import user_spec
from api.settings import ApiSettings
from persistence.db import Database, normalize_url
from persistence.enums import JobTask
from persistence.models import Job
from persistence.repositories import TeamRepository
from tests.service.conftest import client_for
from tests.service.helpers import chain_model, stored_job, submit

RACES = 20
MODEL = chain_model(length=8, mul_at=5).SerializeToString()


@pytest.fixture
def client(
    db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str], tokens: dict[str, str]
) -> Iterator[httpx.Client]:
    settings = ApiSettings(database_url=db_url, redis_url=None, data_dir=data_dir)
    url = serve_app(create_app(settings, enqueue=lambda job_id, queue: None))
    with client_for(url, tokens["team-a"]) as client:
        yield client


def _deadlocks(db_url: str) -> int:
    """PostgreSQL's count of deadlocks detected in the test's database."""
    engine = create_engine(normalize_url(db_url))
    try:
        with engine.connect() as conn:
            query = text("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
            return int(conn.execute(query).scalar_one())
    finally:
        engine.dispose()


def _race(client: httpx.Client, ending: Callable[[str], httpx.Response]) -> list[httpx.Response]:
    """A new interactive job whose first check awaits its verdict; the verdict and ``ending`` sent at once."""
    created = submit(client, MODEL, "kind: interactive\n")
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    awaiting = client.get(f"/v1/jobs/{job_id}").json()["awaiting_verdict"]
    assert awaiting is not None
    start = threading.Barrier(2)

    def verdict() -> httpx.Response:
        start.wait()
        return client.post(f"/v1/jobs/{job_id}/verdict", json={"iteration": awaiting["iteration"], "verdict": "fail"})

    def end() -> httpx.Response:
        start.wait()
        return ending(job_id)

    with ThreadPoolExecutor(2) as pool:
        answers = [pool.submit(verdict), pool.submit(end)]
        return [answer.result() for answer in answers]


@pytest.mark.parametrize("how", ["delete", "cancel"])
def test_verdict_racing_delete_or_cancel_never_deadlocks(client: httpx.Client, db_url: str, how: str) -> None:
    endings: dict[str, Callable[[str], httpx.Response]] = {
        "delete": lambda job_id: client.delete(f"/v1/jobs/{job_id}"),
        "cancel": lambda job_id: client.post(f"/v1/jobs/{job_id}/cancel"),
    }
    before = _deadlocks(db_url)
    answers = [_race(client, endings[how]) for _ in range(RACES)]
    deadlocks = _deadlocks(db_url) - before
    failed = [f"{r.request.method} {r.status_code}: {r.text}" for pair in answers for r in pair if r.status_code >= 500]
    assert failed == []
    assert deadlocks == 0
    for verdict, ended in answers:
        assert verdict.status_code in (200, 404, 409), verdict.text  # answered, or the job went first
        assert ended.status_code in ((204,) if how == "delete" else (200, 202)), ended.text


def test_a_deadlock_that_reaches_a_route_is_a_409_with_retry_after(
    db_url: str, serve_app: Callable[[FastAPI], str]
) -> None:
    """Two requests that lock two rows in opposite orders: PostgreSQL aborts one as a deadlock
    (a real one, no retry around it); the api answers it 409 with Retry-After, not 503 (the
    database is up)."""
    engine = create_engine(normalize_url(db_url))
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE crossed (id int PRIMARY KEY, n int)"))
        conn.execute(text("INSERT INTO crossed VALUES (1, 0), (2, 0)"))
    both_hold_one = threading.Barrier(2, timeout=30)
    app = FastAPI()
    install_problem_handlers(app)

    @app.post("/cross/{first}/{second}")
    def cross(first: int, second: int) -> dict[str, str]:
        with engine.begin() as conn:
            conn.execute(text("UPDATE crossed SET n = n + 1 WHERE id = :id"), {"id": first})
            both_hold_one.wait()
            conn.execute(text("UPDATE crossed SET n = n + 1 WHERE id = :id"), {"id": second})
        return {"status": "ok"}

    url = serve_app(app)
    try:
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda path: httpx.post(url + path, timeout=60), ["/cross/1/2", "/cross/2/1"]))
    finally:
        engine.dispose()
    statuses = sorted(response.status_code for response in answers)
    assert statuses == [200, 409], [response.text for response in answers]
    refused = next(response for response in answers if response.status_code == 409)
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["content-type"] == "application/problem+json"


def test_a_jobs_answer_built_after_its_row_was_deleted_reads_no_deferred_column(database: Database) -> None:
    """The race above, made deterministic: a job loaded, its row deleted by another connection, then
    its answer built (``job_from_row`` reads ``user_spec``). The spec shown comes from the loaded row;
    before, the deferred session state was read for every job, and a deleted row raised (a 500)."""
    with database.session() as session:
        job = stored_job(session, TeamRepository(session).get_or_create("team-race").id)
        session.commit()
        job_id = job.id
    with database.session() as session:
        loaded = session.get(Job, job_id)
        assert loaded is not None
        with database.session() as other:
            other.execute(delete(Job).where(Job.id == job_id))
            other.commit()
        assert user_spec(loaded, JobTask.of(loaded.options)) == loaded.check_spec

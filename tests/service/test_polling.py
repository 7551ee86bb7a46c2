"""The database is the queue (issue 18): a worker takes work it got no message for. A ``WorkerProcess``
(the code each Celery worker and each embedded slot runs) against PostgreSQL, behind an api whose
enqueue sends nothing: an idle worker's poll finds a queued job and finishes it; a job whose
worker died holding it (its lease ran out, nothing queued) is taken again by the poll, and not
before; a job this worker cannot serve (``requires``) is left for a worker that can."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from persistence.contracts import QUEUES
from persistence.db import Database
from persistence.repositories import ClaimResult, JobRepository
from tests.service.helpers import OP_PRESENT_MUL, chain_model, submit
from worker.context import context_from_settings
from worker.process import Delivery, WorkerProcess
from worker.run_job import waiting_job
from worker.settings import WorkerSettings

MODEL = chain_model(6, 3).SerializeToString()
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def nodes(db_url: str, data_dir: Path) -> Iterator[Callable[[str], WorkerProcess]]:
    """Worker nodes offering the given GPUs ("none": no GPU), polling every 0.2 s once started."""
    built: list[WorkerProcess] = []

    def node(gpus: str = "none") -> WorkerProcess:
        settings = WorkerSettings(database_url=db_url, data_dir=data_dir, worker_poll_s=0.2, worker_gpus=gpus)
        built.append(WorkerProcess(settings, context_from_settings(settings), QUEUES))
        return built[-1]

    yield node
    for each in built:
        each.stop()
        each.ctx.db.dispose()


def _job(database: Database, job_id: str) -> dict[str, Any]:
    with database.session() as session:
        job = JobRepository(session).get(job_id)
        assert job is not None
        return {column: getattr(job, column) for column in ("status", "attempts", "checks_run")}


def _event_kinds(database: Database, job_id: str) -> list[str]:
    with database.session() as session:
        query = text("SELECT kind FROM events WHERE job_id = :id ORDER BY seq")
        return [str(kind) for (kind,) in session.execute(query, {"id": job_id})]


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)


def test_an_idle_worker_finishes_a_job_it_got_no_message_for(
    client: httpx.Client, database: Database, nodes: Callable[[str], WorkerProcess]
) -> None:
    job_id = submit(client, MODEL).json()["id"]
    node = nodes("none").start()
    _wait(lambda: _job(database, job_id)["status"] == "succeeded", 180, "the job succeeds")
    job = _job(database, job_id)
    assert job["attempts"] == 1 and job["checks_run"] > 1
    assert _event_kinds(database, job_id).count("job.started") == 1
    # counted once run_job returns, a moment after the job's end was committed
    _wait(lambda: node.activity.jobs_done >= 1, 60, "the worker counts the job it did")


def test_a_job_whose_worker_died_is_taken_again_by_the_poll_once_its_lease_ran_out(
    client: httpx.Client, database: Database, nodes: Callable[[str], WorkerProcess]
) -> None:
    job_id = submit(client, MODEL).json()["id"]
    with database.session() as session:  # a worker claims the job and dies before it queues anything
        assert JobRepository(session).claim(job_id, 600, 3) is ClaimResult.CLAIMED
    node = nodes("none")
    assert waiting_job(node.ctx) is None  # held: its lease is live
    assert node.poll() is None
    with database.session() as session:
        session.execute(
            text("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = :id"), {"id": job_id}
        )
    assert waiting_job(node.ctx) == job_id
    assert node.poll() is Delivery.RAN
    job = _job(database, job_id)
    assert (job["status"], job["attempts"]) == ("succeeded", 2)
    assert waiting_job(node.ctx) is None


def test_a_job_this_worker_cannot_serve_is_left_for_a_worker_that_can(
    client: httpx.Client, database: Database, nodes: Callable[[str], WorkerProcess]
) -> None:
    job_id = submit(client, MODEL, OP_PRESENT_MUL + "requires: {gpu: H100}\n").json()["id"]
    plain = nodes("none")
    assert waiting_job(plain.ctx) is None
    assert plain.poll() is None
    assert plain.work(job_id) is Delivery.HELD  # a wake-up for it: this worker takes nothing
    assert _job(database, job_id) == {"status": "queued", "attempts": 0, "checks_run": 0}
    capable = nodes(H100)
    assert waiting_job(capable.ctx) == job_id
    assert capable.poll() is Delivery.RAN
    assert _job(database, job_id)["status"] == "succeeded"

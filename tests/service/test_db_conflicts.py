"""PostgreSQL deadlocks and serialisation failures are retried in place (``persistence.retry``) and
never count as an attempt of a job: a real deadlock provoked between two connections that lock a
job's row and a unit's row in opposite orders; and several fast-check jobs on three real Celery
workers all succeed at their first attempt."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from persistence.db import Database
from persistence.enums import EventKind, JobStatus
from persistence.repositories import EventRepository, JobRepository, TeamRepository
from persistence.repositories.units import NewUnit, UnitRepository
from persistence.retry import DEADLOCK_DETECTED, is_conflict, sqlstate_of, transaction
from tests.service.conftest import Processes, client_for
from tests.service.helpers import chain_model, stored_job, submit, wait_job

BARRIER_S = 30.0


def _job(db: Database) -> tuple[str, int]:
    """A queued job with one queued check unit: (job id, unit id)."""
    with db.session() as session:
        job = stored_job(session, TeamRepository(session).get_or_create("team-deadlock").id)
        unit_id = UnitRepository(session).add(job.id, [NewUnit("r1", "check", 1, "p", 0, False, {}, 1)])[0]
        return job.id, unit_id


def test_a_real_deadlock_is_retried_in_place_and_the_claim_counts_one_attempt(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Connection A locks the unit, then claims the job (its row); connection B locks the job's row
    (an event), then cancels the unit. Each waits for the other: PostgreSQL aborts one of them
    (40P01), ``transaction`` runs it again, both end, and the job's attempt counter says 1."""
    db = Database(db_url)
    job_id, unit_id = _job(db)
    both_hold_one = threading.Barrier(2, timeout=BARRIER_S)
    runs = {"a": 0, "b": 0}
    errors: list[BaseException] = []

    def first_lock_then_wait(name: str) -> None:
        runs[name] += 1
        if runs[name] == 1:  # only the first run meets the other one halfway
            both_hold_one.wait()

    def a(session: Session) -> None:
        UnitRepository(session).claim(unit_id, "worker-a", 60)  # the unit's row
        first_lock_then_wait("a")
        JobRepository(session).claim(job_id, 60, 3)  # then the job's row

    def b(session: Session) -> None:
        EventRepository(session).append(job_id, EventKind.QUEUED, {})  # the job's row
        first_lock_then_wait("b")
        UnitRepository(session).cancel_active(job_id)  # then the unit's row

    def run(name: str, work: Callable[[Session], None]) -> None:
        try:
            transaction(db, work, f"test {name}")
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    caplog.set_level(logging.WARNING, logger="onnx_reducer.db")
    threads = [threading.Thread(target=run, args=(n, w)) for n, w in (("a", a), ("b", b))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert sorted(runs.values()) == [1, 2], runs  # exactly one of them was aborted and ran again
    assert any(DEADLOCK_DETECTED in r.getMessage() and "deadlock" in r.getMessage() for r in caplog.records)
    with db.session() as session:
        job = JobRepository(session).get(job_id)
        assert job is not None
        assert job.attempts == 1  # the aborted claim was rolled back: no attempt counted for it
        assert job.status == JobStatus.RUNNING.value
    db.dispose()


def test_a_deadlock_that_keeps_happening_is_raised_with_its_sqlstate(db_url: str) -> None:
    """``tries`` bounds the retries: with one try allowed, the real deadlock comes out of
    ``transaction``, recognised by its SQLSTATE (the caller then logs it and gives the work back)."""
    db = Database(db_url)
    job_id, unit_id = _job(db)
    both = threading.Barrier(2, timeout=BARRIER_S)
    caught: list[BaseException] = []

    def a(session: Session) -> None:
        UnitRepository(session).claim(unit_id, "worker-a", 60)
        both.wait()
        JobRepository(session).claim(job_id, 60, 3)

    def b(session: Session) -> None:
        EventRepository(session).append(job_id, EventKind.QUEUED, {})
        both.wait()
        UnitRepository(session).cancel_active(job_id)

    def run(work: Callable[[Session], None]) -> None:
        try:
            transaction(db, work, "test", tries=1)
        except DBAPIError as exc:
            caught.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(caught) == 1
    assert is_conflict(caught[0]) and sqlstate_of(caught[0]) == DEADLOCK_DETECTED
    db.dispose()


FAST_CHECK = "kind: command\ncommand: [sh, -c, '! grep -q {mul} \"$1\"', check, '{{model}}']\ntimeout: 60\n"


@pytest.mark.slow
def test_fast_check_jobs_on_three_workers_all_succeed_at_their_first_attempt(
    command_api_url: str, processes: Processes, tokens: dict[str, str], tmp_path: Path
) -> None:
    """The probe's case: jobs with checks of a few milliseconds on three workers, so that verdicts,
    claims, lease renewals and job ends of the same job cross all the time."""
    for _ in range(3):
        processes.worker()
    models = [(chain_model(16, at).SerializeToString(), f"n{at}_Mul") for at in (3, 7, 11, 13)]
    with client_for(command_api_url, tokens["team-a"]) as client:
        ids = [submit(client, model, FAST_CHECK.format(mul=mul)).json()["id"] for model, mul in models]
        jobs = [wait_job(client, job_id, timeout=300) for job_id in ids]
        numbers = [_numbers(client, job_id) for job_id in ids]
    for job, recorded in zip(jobs, numbers, strict=True):
        assert job["status"] == "succeeded", job
        assert job["attempts"] == 1, job
        # a cancelled check takes no number, a late one the next (marked late): no gap, and the
        # job's iteration count agrees with the list
        assert recorded == list(range(1, len(recorded) + 1)), recorded
        assert job["progress"]["iteration"] == len(recorded), job
    logs = "".join(proc.output() for proc in processes.started)
    assert "workers are gone" not in logs
    assert "database is unreachable" not in logs and "kept aborting" not in logs


def _numbers(client: httpx.Client, job_id: str) -> list[int]:
    items = client.get(f"/v1/jobs/{job_id}/iterations", params={"limit": 1000}).json()["items"]
    return sorted(int(item["number"]) for item in items)


def test_a_transaction_on_a_connection_the_database_dropped_runs_again_on_a_new_one(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A pooled connection in steady use is not pinged before use (``persistence.db``): when the
    database dropped it (a restart, a failover), the transaction's first statement fails, the pool
    starts over, and ``transaction`` runs the work once more on a new connection."""
    db = Database(db_url)
    with db.session() as session:
        dropped = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
    other = Database(db_url)
    with other.session() as session:  # the database ends that connection's backend
        assert session.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dropped}).scalar_one()
    other.dispose()
    runs: list[int] = []

    def work(session: Session) -> int:
        runs.append(1)
        return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())

    caplog.set_level(logging.WARNING, logger="onnx_reducer.db")
    assert transaction(db, work, "test reconnect") != dropped
    assert len(runs) == 2  # the first run met the dead connection
    assert any("the database connection was lost" in r.getMessage() for r in caplog.records)
    db.dispose()

"""``jobflow.ending``: the end an error gives a job, the end's plan and the end itself, on rows of
a real (SQLite) database."""

from __future__ import annotations

import copy
import pickle

import pytest
from sqlalchemy import select

from jobflow.ending import JobCancelledError, JobTimedOutError, end, ending_of, plan_end
from persistence.db import Database
from persistence.enums import ErrorCode, EventKind, JobStatus
from persistence.models import CheckUnit, Job
from persistence.repositories import EventRepository, JobRepository, TeamRepository
from persistence.repositories.units import FINISH, NewUnit, UnitRepository
from reducer_core.errors import CheckInfraError, InvalidModelError, OriginalDidNotFailError, UsageError
from tests.service.helpers import stored_job


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (JobCancelledError(), JobStatus.CANCELLED, None),
        (JobTimedOutError(90), JobStatus.FAILED, ErrorCode.TIME_LIMIT),
        (OriginalDidNotFailError("the original passed"), JobStatus.FAILED, ErrorCode.ORIGINAL_DID_NOT_FAIL),
        (InvalidModelError("not a model"), JobStatus.FAILED, ErrorCode.INVALID_MODEL),
        (CheckInfraError("no GPU"), JobStatus.FAILED, ErrorCode.CHECK_INFRA_ERROR),
        (UsageError("bad spec"), JobStatus.FAILED, ErrorCode.INVALID_CHECK),
        (KeyError("a bug"), JobStatus.FAILED, ErrorCode.INTERNAL),
    ],
)
def test_each_error_gives_its_end(error: Exception, status: JobStatus, code: ErrorCode | None) -> None:
    assert ending_of(error, "job-1")[:2] == (status, code)


def test_the_end_s_messages_say_what_to_do() -> None:
    assert ending_of(JobTimedOutError(90), "job-1")[2] == (
        "The job ran longer than 90s (JOB_TIME_LIMIT_S, counted from its first start)."
    )
    infra = ending_of(CheckInfraError("no GPU"), "job-1")[2] or ""
    assert infra.startswith("no GPU") and "POST /v1/jobs/job-1/retry" in infra
    passed = ending_of(OriginalDidNotFailError("the original passed."), "job-1")[2] or ""
    assert passed.startswith("the original passed.") and "tolerance" in passed  # how to fix the spec
    assert ending_of(KeyError("x"), "job-1")[2] == "KeyError: 'x'"


def _running_job_with_checks(db: Database, speculative: int) -> str:
    """A running job with one queued check and ``speculative`` queued checks run ahead."""
    with db.session() as session:
        job = stored_job(session, TeamRepository(session).get_or_create("team-a").id, JobStatus.RUNNING)
        units = [NewUnit(f"r{i}", "check", i + 1, "p", 1, i > 0, {}, 3) for i in range(1 + speculative)]
        UnitRepository(session).add(job.id, units)
        return job.id


def _units(db: Database, job_id: str) -> list[tuple[str, str]]:
    """The job's units as (kind, status), in the order they were added."""
    with db.session() as session:
        rows = session.scalars(select(CheckUnit).where(CheckUnit.job_id == job_id).order_by(CheckUnit.id))
        return [(unit.kind, unit.status) for unit in rows]


def _plan_end(db: Database, job_id: str) -> int:
    """``plan_end`` on the running job, its row held as a worker holds it; the event's number."""
    with db.session() as session:
        job = JobRepository(session).lock_running(job_id)
        assert job is not None
        return plan_end(session, job)


def test_planning_the_end_cancels_the_checks_in_flight_and_queues_one_finish_unit(db: Database) -> None:
    job_id = _running_job_with_checks(db, speculative=2)
    seq = _plan_end(db, job_id)
    assert _units(db, job_id) == [("check", "cancelled")] * 3 + [(FINISH, "queued")]
    with db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status is JobStatus.FINISHING
        assert [e.kind for e in EventRepository(session).after(job_id, seq - 1)] == [EventKind.FINISHING]


def test_a_finishing_job_that_fails_ends_once_with_its_finish_unit_cancelled(db: Database) -> None:
    job_id = _running_job_with_checks(db, speculative=0)
    planned = _plan_end(db, job_id)
    with db.session() as session:
        job = JobRepository(session).lock_active(job_id)
        assert job is not None
        end(session, job, JobStatus.FAILED, ErrorCode.TIME_LIMIT, "too long")
    assert _units(db, job_id) == [("check", "cancelled"), (FINISH, "cancelled")]
    with db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status is JobStatus.FAILED and job.error_code == ErrorCode.TIME_LIMIT
        assert JobRepository(session).lock_active(job_id) is None  # ended: nothing ends it twice
        kinds = [e.kind for e in EventRepository(session).after(job_id, planned)]
    assert kinds == [EventKind.FAILED]


def test_a_time_out_survives_a_copy_and_a_pickle() -> None:
    timed_out = JobTimedOutError(90)
    for again in (copy.copy(timed_out), pickle.loads(pickle.dumps(timed_out))):
        assert ending_of(again, "job-1") == ending_of(timed_out, "job-1")

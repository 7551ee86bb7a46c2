"""How a job ends when something stops it (the model, the spec, the check's infrastructure, a
cancel, the time limit), whichever worker finds out: ``ending_errors`` maps an error to the job's
end, ``end_job`` takes the job's row and ends it through ``jobflow.ending.end`` (once: only a
running job ends)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.exc import NoResultFound, SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import ObjectDeletedError

from jobflow.ending import end
from persistence.enums import ErrorCode, JobStatus
from persistence.models import Job, utcnow
from persistence.repositories import JobRepository
from persistence.retry import transaction
from persistence.store import ArtifactStoreError
from reducer_core.errors import (
    CheckInfraError,
    InvalidModelError,
    OriginalDidNotFailError,
    ReducerError,
    UsageError,
)
from worker.context import RunnerContext

log = logging.getLogger("onnx_reducer.worker")
ORIGINAL_PASSED_ADVICE = (
    "Check that the job's check spec fails on the uploaded model: for kind compare/golden its tolerance "
    "(atol/rtol) and target, for kind error its match, for op-present its ops/names."
)


class JobCancelledError(Exception):
    pass


class JobTimedOutError(Exception):
    pass


def deadline_of(job: Job, ctx: RunnerContext) -> datetime:
    started = job.started_at or utcnow()
    started = started if started.tzinfo else started.replace(tzinfo=UTC)
    return started + timedelta(seconds=ctx.time_limit_s)


def end_job(ctx: RunnerContext, job_id: str, status: JobStatus, code: ErrorCode | None, message: str | None) -> bool:
    """End the job if it is still running or finishing (False: another worker ended it first)."""

    def end_running(session: Session) -> int | None:
        job = JobRepository(session).lock_active(job_id)
        return None if job is None else end(session, job, status, code, message)

    seq = transaction(ctx.db, end_running, f"job {job_id}: ending it")
    if seq is None:
        return False
    ctx.notify(job_id, seq)
    return True


@dataclass
class StopPoll:
    """The stop scope's question for a unit a worker runs (``checks.cancel.stop_checks_when``): its
    lease ``lost``, or the job row (read at most every ``every`` seconds) gone, cancelled, no longer
    ``status``, or past ``deadline``."""

    ctx: RunnerContext
    job_id: str
    status: JobStatus
    deadline: datetime | None
    every: float
    polled: float = 0.0  # when the row was last read (``time.monotonic``)
    lost: threading.Event | None = None

    def __call__(self) -> bool:
        if self.lost is not None and self.lost.is_set():
            return True
        now = time.monotonic()
        if now - self.polled < self.every:
            return False
        self.polled = now
        if self.deadline is not None and utcnow() > self.deadline:
            return True
        with self.ctx.db.session() as db:
            job = JobRepository(db).get(self.job_id)
            return job is None or job.cancel_requested or job.status != self.status


def end_if_stopped(ctx: RunnerContext, job_id: str, deadline: datetime | None) -> None:
    """A unit was stopped: its job ends if it was cancelled or is out of time (once); a lost lease
    leaves the job to the worker that took the unit."""
    with ctx.db.session() as db:
        cancelled = JobRepository(db).cancel_requested(job_id)
    if cancelled:
        end_job(ctx, job_id, JobStatus.CANCELLED, None, None)
    elif deadline is not None and utcnow() > deadline:
        end_job(ctx, job_id, JobStatus.FAILED, ErrorCode.TIME_LIMIT, time_limit_message(ctx))


def end_overdue_finishing(ctx: RunnerContext) -> list[str]:
    """End the finishing jobs of this worker's queues that are past their time limit (counted from
    their first start, as a running job's): a finish unit nobody claims holds no deadline of its
    own. A finish running meanwhile stops within a second (its job is no longer finishing). The
    ids of the jobs ended here."""
    cutoff = utcnow() - timedelta(seconds=ctx.time_limit_s)
    with ctx.db.session() as db:
        overdue = JobRepository(db).finishing_started_before(cutoff, ctx.queues)
    message = time_limit_message(ctx)
    return [job_id for job_id in overdue if end_job(ctx, job_id, JobStatus.FAILED, ErrorCode.TIME_LIMIT, message)]


def time_limit_message(ctx: RunnerContext) -> str:
    return f"The job ran longer than {ctx.time_limit_s:g}s (JOB_TIME_LIMIT_S, counted from its first start)."


def ending_of(exc: BaseException, ctx: RunnerContext, job_id: str) -> tuple[JobStatus, ErrorCode | None, str | None]:
    """The end an error gives the job."""
    if isinstance(exc, JobCancelledError):
        return JobStatus.CANCELLED, None, None
    if isinstance(exc, JobTimedOutError):
        return JobStatus.FAILED, ErrorCode.TIME_LIMIT, time_limit_message(ctx)
    if isinstance(exc, OriginalDidNotFailError):
        return JobStatus.FAILED, ErrorCode.ORIGINAL_DID_NOT_FAIL, f"{exc} {ORIGINAL_PASSED_ADVICE}"
    if isinstance(exc, InvalidModelError):
        return JobStatus.FAILED, ErrorCode.INVALID_MODEL, str(exc)
    if isinstance(exc, CheckInfraError):
        advice = (
            " The job keeps its finished checks: once the check's infrastructure works again, "
            f"POST /v1/jobs/{job_id}/retry resumes it from its last finished check."
        )
        return JobStatus.FAILED, ErrorCode.CHECK_INFRA_ERROR, str(exc) + advice
    if isinstance(exc, UsageError | ReducerError):
        return JobStatus.FAILED, ErrorCode.INVALID_CHECK, str(exc)
    return JobStatus.FAILED, ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}"


@contextmanager
def ending_errors(ctx: RunnerContext, job_id: str) -> Iterator[None]:
    """Any error in the block ends the job (a bug too: logged, the job fails as internal). A job
    deleted meanwhile (its row gone under a statement that needed it) is logged as deleted."""
    try:
        yield
    except (NoResultFound, ObjectDeletedError):
        if _job_exists(ctx, job_id):
            raise
        log.info("job %s: job deleted while a worker worked on it; its work stops", job_id)
    except SQLAlchemyError:
        raise  # the database is unreachable: the job is taken again once it is back
    except Exception as exc:
        if isinstance(exc, ArtifactStoreError) and exc.transient:
            log.warning("job %s: the artifact store is unavailable; the job is taken again once it is back", job_id)
            raise  # (as the database: its lease runs out and a worker claims it again)
        status, code, message = ending_of(exc, ctx, job_id)
        if code is ErrorCode.INTERNAL:
            log.exception("job %s failed", job_id)
        end_job(ctx, job_id, status, code, message)


def _job_exists(ctx: RunnerContext, job_id: str) -> bool:
    with ctx.db.session() as session:
        return JobRepository(session).get(job_id) is not None

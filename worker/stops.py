"""How a worker's work on a job stops, whichever worker finds out: a cancel, the time limit or a
lost lease stops a running unit (``StopPoll``, ``end_if_stopped``), an error in the work ends the
job (``ending_errors``: the end an error gives is ``jobflow.ending.ending_of``), a finishing job
past its limit is ended (``end_overdue_finishing``). The end itself is ``jobflow.ending``'s, the
one way: ``end_job`` takes the job's row and ends it there (once: only an active job ends)."""

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

from jobflow.ending import end, ending_of, time_limit_message
from persistence.enums import ErrorCode, JobStatus
from persistence.models import Job, utcnow
from persistence.repositories import JobRepository
from persistence.retry import transaction
from persistence.store import ArtifactStoreError
from worker.context import RunnerContext

log = logging.getLogger("onnx_reducer.worker")


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
        end_job(ctx, job_id, JobStatus.FAILED, ErrorCode.TIME_LIMIT, time_limit_message(ctx.time_limit_s))


def end_overdue_finishing(ctx: RunnerContext) -> list[str]:
    """End the finishing jobs of this worker's queues that are past their time limit (counted from
    their first start, as a running job's): a finish unit nobody claims holds no deadline of its
    own. A finish running meanwhile stops within a second (its job is no longer finishing). The
    ids of the jobs ended here."""
    cutoff = utcnow() - timedelta(seconds=ctx.time_limit_s)
    with ctx.db.session() as db:
        overdue = JobRepository(db).finishing_started_before(cutoff, ctx.queues)
    message = time_limit_message(ctx.time_limit_s)
    return [job_id for job_id in overdue if end_job(ctx, job_id, JobStatus.FAILED, ErrorCode.TIME_LIMIT, message)]


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
        status, code, message = ending_of(exc, job_id)
        if code is ErrorCode.INTERNAL:
            log.exception("job %s failed", job_id)
        end_job(ctx, job_id, status, code, message)


def _job_exists(ctx: RunnerContext, job_id: str) -> bool:
    with ctx.db.session() as session:
        return JobRepository(session).get(job_id) is not None

"""What a worker running a job's probes one by one (``worker.passes_job``, ``worker.release_job``)
asks the job's row between them: whether to go on (``stop_if_asked``: a cancel, the time limit,
the job ended elsewhere) and, to write a probe's result, the row itself while this worker's
attempt still holds it (``held``); and the job's prepared model for the run (``probing``)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session

from jobflow.ending import JobCancelledError, JobTimedOutError
from persistence.models import Job, utcnow
from persistence.repositories import JobRepository
from worker.context import RunnerContext
from worker.prepared import JobInput, PreparedJob, prepared_job
from worker.stops import deadline_of

log = logging.getLogger("onnx_reducer.worker")


class JobGoneError(Exception):
    """The job ended, or another worker took it, while this one ran a probe."""


def stop_if_asked(ctx: RunnerContext, job_id: str) -> None:
    """Raise what ends the job's run before its next probe: ``JobGoneError`` (it ended or is
    gone), ``JobCancelledError`` (a cancel was asked) or ``JobTimedOutError`` (past its limit)."""
    with ctx.db.session() as session:
        going_on(ctx, JobRepository(session).get(job_id))


def going_on(ctx: RunnerContext, job: Job | None) -> Job:
    """``job``, when nothing asked it to stop (what ``stop_if_asked`` raises, else)."""
    if job is None or job.status.terminal:
        raise JobGoneError()
    if job.cancel_requested:
        raise JobCancelledError()
    if utcnow() > deadline_of(job, ctx):
        raise JobTimedOutError(ctx.time_limit_s)
    return job


def held(session: Session, job_id: str, attempt: int) -> Job:
    """The job's row, locked, while it runs under this worker's ``attempt`` (else ``JobGoneError``)."""
    job = JobRepository(session).lock_running(job_id)
    if job is None or job.attempts != attempt:
        raise JobGoneError()
    return job


@contextmanager
def probing(ctx: RunnerContext, job_id: str, job_input: JobInput, while_doing: str) -> Iterator[PreparedJob]:
    """The job's prepared model for its probes, dropped with its work folder when they end; a
    ``JobGoneError`` among them ends the run quietly (logged: gone ``while_doing``)."""
    prepared = prepared_job(job_input, ctx)
    try:
        yield prepared
    except JobGoneError:
        log.info("job %s: ended or taken by another worker while %s", job_id, while_doing)
    finally:
        ctx.prepared.drop(job_id)
        shutil.rmtree(prepared.work_dir, ignore_errors=True)

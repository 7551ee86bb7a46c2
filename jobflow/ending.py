"""A job's end, the one way: ``end`` (failed, cancelled) and ``succeed`` (its answer's artifacts
stored by the caller first), always on a row the caller holds (``JobRepository.lock_running`` /
``lock_active``, or the conditional UPDATE of a cancel): the job's pending iteration dropped, its
queued and running checks cancelled (their workers stop within a second), its status written, and
its one terminal event recorded.

A successful end is planned first (``plan_end``, short and database only, under the job's row
lock when its session is done): the job becomes ``finishing``, its speculative checks are
cancelled and one *finish* unit is queued, which any worker claims like a check and runs outside
any lock, holding the unit's lease (``worker.finishing``: the final models stored, the bundle
built and self-checked, the answer verified); a short transaction then ends the job here. A
verdict that lands after the plan finds no running job: it re-plans nothing."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from persistence import tracing
from persistence.enums import ErrorCode, EventKind, JobStatus
from persistence.events import AnswerPayload, FinishingPayload, JobEndPayload, end_kind, record_event
from persistence.models import Job, Team, utcnow
from persistence.repositories import CancelOutcome, IterationRepository, JobRepository
from persistence.repositories.units import UnitRepository
from reducer_core.errors import CheckInfraError, InvalidModelError, OriginalDidNotFailError, ReducerError, UsageError

log = logging.getLogger("onnx_reducer.jobflow")
ORIGINAL_PASSED_ADVICE = (
    "Check that the job's check spec fails on the uploaded model: for kind compare/golden its tolerance "
    "(atol/rtol) and target, for kind error its match, for op-present its ops/names."
)


class JobCancelledError(Exception):
    """A cancel was asked for the job: it ends cancelled."""


class JobTimedOutError(Exception):
    """The job ran past its time limit (``time_limit_s``, counted from its first start): it fails."""

    def __init__(self, time_limit_s: float) -> None:
        super().__init__(time_limit_message(time_limit_s))
        self.time_limit_s = time_limit_s

    def __reduce__(self) -> tuple[type[JobTimedOutError], tuple[float]]:
        return type(self), (self.time_limit_s,)  # copied or pickled from its limit, not its message


def time_limit_message(time_limit_s: float) -> str:
    return f"The job ran longer than {time_limit_s:g}s (JOB_TIME_LIMIT_S, counted from its first start)."


def ending_of(exc: BaseException, job_id: str) -> tuple[JobStatus, ErrorCode | None, str | None]:
    """The end an error gives the job (status, error code, message), whoever met it: the worker's
    check, preparation or start (``worker.stops.ending_errors``), or a step of its session."""
    if isinstance(exc, JobCancelledError):
        return JobStatus.CANCELLED, None, None
    if isinstance(exc, JobTimedOutError):
        return JobStatus.FAILED, ErrorCode.TIME_LIMIT, str(exc)
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


def end_payload(job: Job) -> JobEndPayload:
    """What every terminal event of ``job`` says."""
    return {
        "status": job.status,
        "nodes_before": job.nodes_before,
        "nodes_after": job.nodes_after,
        "checks_run": job.checks_run,
        "error_code": job.error_code,
        "error_message": job.error_message,
    }


def end(
    db: Session,
    job: Job,
    status: JobStatus,
    code: ErrorCode | None = None,
    message: str | None = None,
    answer: AnswerPayload | None = None,
) -> int:
    """End ``job`` (held by the caller) with ``status``; ``answer``: what a success adds to its
    event. Returns the terminal event's sequence number."""
    iterations = IterationRepository(db)
    iterations.drop_pending(job.id)
    UnitRepository(db).cancel_active(job.id)
    if status is not JobStatus.SUCCEEDED:
        _best_so_far(iterations, job)
    JobRepository(db).finish(job, status, code, message)
    return record_end(db, job, answer)


def plan_end(db: Session, job: Job) -> int:
    """``job`` (held, running) has its answer: ``finishing`` now, its checks in flight cancelled
    (their workers stop within a second), its finish unit queued (the caller announces it).
    Returns the ``job.finishing`` event's sequence number."""
    units = UnitRepository(db)
    units.cancel_active(job.id)
    units.add_finish(job.id)
    job.status = JobStatus.FINISHING
    said: FinishingPayload = {"status": JobStatus.FINISHING, "best_size": job.best_size, "checks_run": job.checks_run}
    return record_event(db, job, EventKind.FINISHING, said)


def _best_so_far(iterations: IterationRepository, job: Job) -> None:
    """A job ended early offers its smallest reproducing model (``best_failing``, what a download
    gives): its size is the job's ``best_size``, also when a check run ahead found it before the
    search took it up."""
    best = iterations.best_failing(job.id)
    if best is not None and (job.best_size is None or best.node_count < job.best_size):
        job.best_size = best.node_count


def record_end(db: Session, job: Job, answer: AnswerPayload | None = None) -> int:
    """The terminal event of ``job``, ended by ``end`` or by a conditional UPDATE (a queued job's
    cancel, a claim out of attempts); its one log line once the end is committed."""
    payload: JobEndPayload = {**(answer or {}), **end_payload(job)}
    tracing.job_end(db, job)
    _log_once_committed(db, job)
    return record_event(db, job.id, end_kind(job.status), payload)


def _log_once_committed(db: Session, job: Job) -> None:
    """One line per job end, with its outcome, by whichever process ended it (a transaction run
    again after a conflict logs nothing for the try that was rolled back)."""
    outcome = job.status + (f" ({job.error_code})" if job.error_code else "")
    started, ended = job.started_at or job.created_at, job.finished_at or utcnow()
    seconds = (_aware(ended) - _aware(started)).total_seconds() if started is not None else 0.0
    team = db.scalar(select(Team.name).where(Team.id == job.team_id))
    line = (job.id, outcome, team, seconds, job.checks_run, job.cache_hits)

    def log_end(_: Session) -> None:
        log.info("job %s ended: %s, team %s, %.1f s, %d checks, %d cache hits", *line)

    event.listen(db, "after_commit", log_end, once=True)


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes (stored as UTC)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def succeed(db: Session, job: Job, answer: AnswerPayload | None = None) -> int:
    """``job`` (held) found its answer, whose artifacts the caller stored."""
    return end(db, job, JobStatus.SUCCEEDED, answer=answer)


def cancel(db: Session, job: Job, *, at_once: bool) -> int | None:
    """A cancel asked for ``job``: a queued job ends here; a running one is flagged for its
    workers, or ends here too when ``at_once`` (nobody works on it between checks: an interactive
    job). Returns the terminal event's number when the job ended now."""
    outcome = JobRepository(db).request_cancel(job.id)
    if outcome is CancelOutcome.ALREADY_ENDED or (outcome is CancelOutcome.REQUESTED and not at_once):
        return None
    db.refresh(job)
    if outcome is CancelOutcome.CANCELLED:  # request_cancel ended it (a conditional UPDATE)
        return record_end(db, job)
    return end(db, job, JobStatus.CANCELLED)

"""Jobs: creation, team-scoped lookups, pagination, the atomic claim with its attempt cap, progress
and the end of a job."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, exists, func, or_, select, update
from sqlalchemy.orm import Session

from persistence.enums import ACTIVE_STATUSES, TERMINAL_STATUSES, ErrorCode, JobStatus
from persistence.models import CheckUnit, Job, Team, utcnow
from persistence.repositories.labels import has_label

RETRYABLE_ERRORS = (
    ErrorCode.CHECK_INFRA_ERROR,
    ErrorCode.TOO_MANY_ATTEMPTS,
    ErrorCode.TIME_LIMIT,
    ErrorCode.INTERNAL,
)


class CancelOutcome(enum.StrEnum):
    CANCELLED = "cancelled"  # it was queued: cancelled now
    REQUESTED = "requested"  # it is running: its worker stops it
    ALREADY_ENDED = "already-ended"


class ClaimResult(enum.StrEnum):
    CLAIMED = "claimed"
    BUSY = "busy"  # another worker holds a live lease
    FINISHED = "finished"  # nothing left to do (terminal, or just cancelled/exhausted here)


@dataclass(frozen=True)
class QueueDepth:
    team: str
    queue: str
    jobs: int


@dataclass(frozen=True)
class CheckTotals:
    """A team's checks run and cache hits over all its jobs (``farm_hits``: those of ``cache_hits``
    answered from the farm's verdicts)."""

    team: str
    checks: int
    cache_hits: int
    farm_hits: int


@dataclass(frozen=True)
class JobPage:
    jobs: Sequence[Job]
    next_key: tuple[datetime, str] | None


class JobRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, job: Job) -> Job:
        self.session.add(job)
        self.session.flush()
        return job

    def get(self, job_id: str) -> Job | None:
        return self.session.get(Job, job_id)

    def for_team(self, team_id: str, job_id: str) -> Job | None:
        """The only way the api looks a job up: another team's job is simply not found (the
        worker's bulky session state is loaded only if it is read: ``Job.session_state``)."""
        query = select(Job).where(Job.id == job_id, Job.team_id == team_id)
        return self.session.scalar(query)

    def flakiness(self, job_id: str) -> dict[str, Any] | None:
        """The ``flaky`` entry of the job's session state (``reducer_core.flakiness``: the check's
        estimated failure rate and the evidence), read alone: the whole state is bulky."""
        value = self.session.scalar(select(Job.session_state["flaky"]).where(Job.id == job_id))
        return value if isinstance(value, dict) else None

    def by_idempotency_key(self, team_id: str, key: str) -> Job | None:
        return self.session.scalar(select(Job).where(Job.team_id == team_id, Job.idempotency_key == key))

    def page(
        self,
        team_id: str,
        status: JobStatus | None,
        limit: int,
        after: tuple[datetime, str] | None,
        labels: Mapping[str, str] | None = None,
    ) -> JobPage:
        """``labels``: only jobs carrying every one of them."""
        query = select(Job).where(Job.team_id == team_id)
        for key, value in (labels or {}).items():
            query = query.where(has_label(key, value))
        if status is not None:
            query = query.where(Job.status == status)
        if after is not None:
            created, job_id = after
            query = query.where(or_(Job.created_at < created, and_(Job.created_at == created, Job.id < job_id)))
        rows = self.session.scalars(query.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit + 1)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        return JobPage(rows, (rows[-1].created_at, rows[-1].id) if more and rows else None)

    def claim(self, job_id: str, lease_s: float, max_attempts: int) -> ClaimResult:
        """Conditional UPDATE: queued (or running with an expired lease), not cancelled, under the
        attempt cap. Exactly one worker wins; a redelivered message of a live job finds it BUSY."""
        now = utcnow()
        waiting = exists().where(CheckUnit.job_id == Job.id, CheckUnit.status == "queued")
        claimable = or_(
            Job.status == JobStatus.QUEUED,
            and_(
                Job.status == JobStatus.RUNNING,
                or_(Job.lease_expires_at.is_(None), Job.lease_expires_at < now),
                ~waiting,
            ),
        )
        result = self.session.execute(
            update(Job)
            .where(Job.id == job_id, Job.cancel_requested.is_(False), Job.attempts < max_attempts, claimable)
            .values(
                status=JobStatus.RUNNING,
                attempts=Job.attempts + 1,
                lease_expires_at=now + timedelta(seconds=lease_s),
                started_at=func.coalesce(Job.started_at, now),
            )
            .returning(Job.id)
        ).first()
        if result is not None:
            return ClaimResult.CLAIMED
        return self._why_not_claimed(job_id, max_attempts)

    def _why_not_claimed(self, job_id: str, max_attempts: int) -> ClaimResult:
        """Nobody may finish a job whose worker still holds a live lease: that worker ends it."""
        job = self.get(job_id)
        if job is None or job.status.terminal:
            return ClaimResult.FINISHED
        if job.status == JobStatus.RUNNING and _aware(job.lease_expires_at) >= utcnow():
            return ClaimResult.BUSY
        if job.cancel_requested:
            return ClaimResult.FINISHED if self._finish_unheld(job, JobStatus.CANCELLED) else ClaimResult.BUSY
        if job.attempts >= max_attempts:
            message = f"The job was started {job.attempts} times and never finished (a worker died each time)."
            ended = self._finish_unheld(job, JobStatus.FAILED, ErrorCode.TOO_MANY_ATTEMPTS, message)
            return ClaimResult.FINISHED if ended else ClaimResult.BUSY
        return ClaimResult.BUSY

    def _finish_unheld(
        self, job: Job, status: JobStatus, code: ErrorCode | None = None, message: str | None = None
    ) -> bool:
        """End a job nobody holds, unless it changed since it was read (then someone else acts)."""
        result = self.session.execute(
            update(Job)
            .where(Job.id == job.id, Job.status == job.status, Job.attempts == job.attempts)
            .values(**_end_values(status, code, message))
            .returning(Job.id)
        ).first()
        if result is not None:
            self.session.refresh(job)
        return result is not None

    def renew_lease(self, job_id: str, lease_s: float, attempt: int) -> bool:
        """Extend the lease of ``attempt``; False when that attempt no longer holds the job (another
        worker claimed it after the lease ran out, or it ended)."""
        expires = utcnow() + timedelta(seconds=lease_s)
        result = self.session.execute(
            update(Job).where(*_held_by(job_id, attempt)).values(lease_expires_at=expires).returning(Job.id)
        ).first()
        return result is not None

    def lock_running(self, job_id: str) -> Job | None:
        """The job, if running, locked until the transaction ends: every worker that records a
        check of it or advances its session goes through here, one at a time (the UPDATE takes
        the row lock on PostgreSQL and the write lock on SQLite before anything is read)."""
        touch = (
            update(Job)
            .where(Job.id == job_id, Job.status == JobStatus.RUNNING)
            .values(event_seq=Job.event_seq)
            .returning(Job)
        )
        options = {"populate_existing": True, "synchronize_session": False}  # the returned row refreshes the job
        return self.session.scalars(touch, execution_options=options).first()

    def lock_finishing(self, job_id: str) -> Job | None:
        """``lock_running`` for a job whose end is planned (``finishing``: its finish unit stores and
        verifies the answer); a late verdict finds no running job here and re-plans nothing."""
        return self._lock_in(job_id, (JobStatus.FINISHING,))

    def lock_ended(self, job_id: str) -> Job | None:
        """``lock_running`` for a job that has ended (a verdict landing after its end is recorded
        as a late iteration, ``jobflow.recording.record_late``, and re-plans nothing)."""
        return self._lock_in(job_id, TERMINAL_STATUSES)

    def finishing_started_before(self, moment: datetime, queues: Sequence[str]) -> list[str]:
        """Finishing jobs of ``queues`` first started before ``moment`` (past their time limit:
        the next worker heartbeat ends them, also when nobody claims their finish unit)."""
        query = select(Job.id).where(
            Job.status == JobStatus.FINISHING, Job.started_at < moment, Job.queue.in_(list(queues))
        )
        return list(self.session.scalars(query).all())

    def lock_active(self, job_id: str) -> Job | None:
        """``lock_running`` for a running or finishing job: what ends a job early (a cancel, the time
        limit, an error) takes it either way."""
        return self._lock_in(job_id, ACTIVE_STATUSES)

    def _lock_in(self, job_id: str, statuses: Sequence[JobStatus]) -> Job | None:
        touch = (
            update(Job)
            .where(Job.id == job_id, Job.status.in_(list(statuses)))
            .values(event_seq=Job.event_seq)
            .returning(Job)
        )
        options = {"populate_existing": True, "synchronize_session": False}
        return self.session.scalars(touch, execution_options=options).first()

    def keep_alive(self, job_id: str, lease_s: float) -> None:
        """A worker runs a check of the job: its lease runs on (a job nobody keeps alive is taken again)."""
        expires = utcnow() + timedelta(seconds=lease_s)
        self.session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == JobStatus.RUNNING, Job.lease_expires_at < expires)
            .values(lease_expires_at=expires)
            .execution_options(synchronize_session="fetch")  # SQLite's naive datetimes cannot be compared in Python
        )

    @staticmethod
    def extend_lease(job: Job, lease_s: float) -> None:
        """``keep_alive`` for a job whose row the caller holds locked: written with its other changes."""
        expires = utcnow() + timedelta(seconds=lease_s)
        if job.lease_expires_at is None or _aware(job.lease_expires_at) < expires:
            job.lease_expires_at = expires

    def cancelled_running(self, queues: Sequence[str]) -> list[str]:
        """Running or finishing jobs of ``queues`` whose cancel was requested (the next worker that
        looks ends them)."""
        query = select(Job.id).where(
            Job.status.in_(list(ACTIVE_STATUSES)), Job.cancel_requested.is_(True), Job.queue.in_(list(queues))
        )
        return list(self.session.scalars(query).all())

    def queued_line(self, queue: str) -> list[tuple[str, str]]:
        """(job id, team name) of the queued jobs of ``queue``, oldest first."""
        query = (
            select(Job.id, Team.name)
            .join(Team, Team.id == Job.team_id)
            .where(Job.status == JobStatus.QUEUED, Job.queue == queue)
            .order_by(Job.created_at, Job.id)
        )
        return [(str(job_id), str(team)) for job_id, team in self.session.execute(query).all()]

    def running_count(self, queue: str) -> int:
        query = select(func.count()).where(Job.status == JobStatus.RUNNING, Job.queue == queue)
        return int(self.session.scalar(query) or 0)

    def cancel_requested(self, job_id: str) -> bool:
        return bool(self.session.scalar(select(Job.cancel_requested).where(Job.id == job_id)))

    def request_cancel(self, job_id: str) -> CancelOutcome:
        """Conditional UPDATEs, so a cancel racing a claim has exactly one outcome: a queued job is
        cancelled here (its caller appends the one terminal event); a running one gets the flag and
        its worker ends it; a finished one is left alone."""
        cancelled = self.session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == JobStatus.QUEUED)
            .values(cancel_requested=True, **_end_values(JobStatus.CANCELLED, None, None))
            .returning(Job.id)
        ).first()
        if cancelled is not None:
            return CancelOutcome.CANCELLED
        flagged = self.session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status.in_(list(ACTIVE_STATUSES)))
            .values(cancel_requested=True)
            .returning(Job.id)
        ).first()
        return CancelOutcome.REQUESTED if flagged is not None else CancelOutcome.ALREADY_ENDED

    def retry(self, job_id: str) -> bool:
        """A failed job whose failure was not the model's or the spec's goes back to the queue with
        its strategy state and verdict cache: it resumes from its last finished check, with a fresh
        attempt count and time budget."""
        result = self.session.execute(
            update(Job)
            .where(
                Job.id == job_id,
                Job.status == JobStatus.FAILED,
                Job.error_code.in_([c.value for c in RETRYABLE_ERRORS]),
            )
            .values(
                status=JobStatus.QUEUED,
                attempts=0,
                started_at=None,
                finished_at=None,
                lease_expires_at=None,
                error_code=None,
                error_message=None,
                cancel_requested=False,
            )
            .returning(Job.id)
        ).first()
        return result is not None

    def finish(self, job: Job, status: JobStatus, code: ErrorCode | None = None, message: str | None = None) -> None:
        """End ``job``: only on a row obtained from ``held`` (or not yet handed to any worker)."""
        for key, value in _end_values(status, code, message).items():
            setattr(job, key, value)

    def queue_depths(self) -> list[QueueDepth]:
        """Queued jobs per team and queue."""
        query = (
            select(Team.name, Job.queue, func.count())
            .join(Team, Team.id == Job.team_id)
            .where(Job.status == JobStatus.QUEUED)
            .group_by(Team.name, Job.queue)
        )
        return [QueueDepth(str(team), str(queue), int(n)) for team, queue, n in self.session.execute(query).all()]

    def check_totals(self) -> list[CheckTotals]:
        """Checks run and verdicts answered from a cache (all, and the farm's) per team."""
        query = (
            select(Team.name, func.sum(Job.checks_run), func.sum(Job.cache_hits), func.sum(Job.farm_hits))
            .select_from(Job)
            .join(Team, Team.id == Job.team_id)
            .group_by(Team.name)
        )
        rows = self.session.execute(query).all()
        return [CheckTotals(str(team), int(c or 0), int(h or 0), int(f or 0)) for team, c, h, f in rows]

    def counts_by_status(self) -> dict[str, int]:
        rows = self.session.execute(select(Job.status, func.count()).group_by(Job.status)).all()
        return {str(status): int(count) for status, count in rows}


def _held_by(job_id: str, attempt: int) -> tuple[Any, ...]:
    return (Job.id == job_id, Job.attempts == attempt, Job.status == JobStatus.RUNNING)


def _end_values(status: JobStatus, code: ErrorCode | None, message: str | None) -> dict[str, Any]:
    return {
        "status": status,
        "finished_at": utcnow(),
        "lease_expires_at": None,
        "error_code": code.value if code else None,
        "error_message": message,
    }


def _aware(moment: datetime | None) -> datetime:
    """SQLite hands back naive datetimes (stored as UTC)."""
    if moment is None:
        return datetime.min.replace(tzinfo=UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


__all__ = [
    "RETRYABLE_ERRORS",
    "TERMINAL_STATUSES",
    "CancelOutcome",
    "CheckTotals",
    "ClaimResult",
    "JobPage",
    "JobRepository",
    "QueueDepth",
]

"""Jobs: creation, team-scoped lookups, pagination, the atomic claim with its attempt cap, progress
and the end of a job."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from persistence.enums import TERMINAL_STATUSES, ErrorCode, JobStatus
from persistence.models import Job, utcnow


class ClaimResult(enum.StrEnum):
    CLAIMED = "claimed"
    BUSY = "busy"  # another worker holds a live lease
    FINISHED = "finished"  # nothing left to do (terminal, or just cancelled/exhausted here)


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
        """The only way the api looks a job up: another team's job is simply not found."""
        return self.session.scalar(select(Job).where(Job.id == job_id, Job.team_id == team_id))

    def by_idempotency_key(self, team_id: str, key: str) -> Job | None:
        return self.session.scalar(select(Job).where(Job.team_id == team_id, Job.idempotency_key == key))

    def page(self, team_id: str, status: JobStatus | None, limit: int, after: tuple[datetime, str] | None) -> JobPage:
        query = select(Job).where(Job.team_id == team_id)
        if status is not None:
            query = query.where(Job.status == status.value)
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
        claimable = or_(
            Job.status == JobStatus.QUEUED.value,
            and_(
                Job.status == JobStatus.RUNNING.value, or_(Job.lease_expires_at.is_(None), Job.lease_expires_at < now)
            ),
        )
        result = self.session.execute(
            update(Job)
            .where(Job.id == job_id, Job.cancel_requested.is_(False), Job.attempts < max_attempts, claimable)
            .values(
                status=JobStatus.RUNNING.value,
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
        job = self.get(job_id)
        if job is None or JobStatus(job.status).terminal:
            return ClaimResult.FINISHED
        if job.cancel_requested:
            self.finish(job, JobStatus.CANCELLED)
            return ClaimResult.FINISHED
        if job.attempts >= max_attempts:
            message = f"The job was started {job.attempts} times and never finished (a worker died each time)."
            self.finish(job, JobStatus.FAILED, ErrorCode.TOO_MANY_ATTEMPTS, message)
            return ClaimResult.FINISHED
        return ClaimResult.BUSY

    def renew_lease(self, job_id: str, lease_s: float) -> None:
        expires = utcnow() + timedelta(seconds=lease_s)
        self.session.execute(update(Job).where(Job.id == job_id).values(lease_expires_at=expires))

    def cancel_requested(self, job_id: str) -> bool:
        return bool(self.session.scalar(select(Job.cancel_requested).where(Job.id == job_id)))

    def request_cancel(self, job: Job) -> None:
        """Queued jobs are cancelled at once; running ones stop at the worker's next poll."""
        job.cancel_requested = True
        if job.status == JobStatus.QUEUED.value:
            self.finish(job, JobStatus.CANCELLED)

    def finish(self, job: Job, status: JobStatus, code: ErrorCode | None = None, message: str | None = None) -> None:
        job.status, job.finished_at, job.lease_expires_at = status.value, utcnow(), None
        job.error_code = code.value if code else None
        job.error_message = message

    def orphans(self, queued_older_than_s: float | None) -> Sequence[Job]:
        """Jobs nobody is working on: running with an expired lease, and (unless None) jobs queued
        for longer than ``queued_older_than_s``."""
        now = utcnow()
        condition = and_(Job.status == JobStatus.RUNNING.value, Job.lease_expires_at < now)
        if queued_older_than_s is not None:
            since = now - timedelta(seconds=queued_older_than_s)
            condition = or_(condition, and_(Job.status == JobStatus.QUEUED.value, Job.created_at < since))
        return self.session.scalars(select(Job).where(condition)).all()

    def counts_by_status(self) -> dict[str, int]:
        rows = self.session.execute(select(Job.status, func.count()).group_by(Job.status)).all()
        return {str(status): int(count) for status, count in rows}

    @staticmethod
    def progress(job: Job, **values: Any) -> None:
        for key, value in values.items():
            setattr(job, key, value)


__all__ = ["TERMINAL_STATUSES", "ClaimResult", "JobPage", "JobRepository"]

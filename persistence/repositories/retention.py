"""The queries of deletion and retention (``persistence/retention.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from persistence.enums import TERMINAL_STATUSES
from persistence.models import Artifact, Job

_FINISHED = list(TERMINAL_STATUSES)


class RetentionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def lock_finished(self, job_id: str) -> bool:
        """Lock the job's row when it is there and finished (a retry cannot start it meanwhile)."""
        query = select(Job.id).where(Job.id == job_id, Job.status.in_(_FINISHED)).with_for_update()
        return self.session.scalar(query) is not None

    def blob_keys_of(self, job_id: str) -> set[str]:
        return set(self.session.scalars(select(Artifact.storage_key).where(Artifact.job_id == job_id)).all())

    def delete_finished(self, job_id: str) -> str | None:
        """Delete a finished job's row (its iterations, events, check units and artifact rows go with
        it: ON DELETE CASCADE); its model's sha256, or None when it is not there or not finished."""
        return self.session.execute(
            delete(Job).where(Job.id == job_id, Job.status.in_(_FINISHED)).returning(Job.model_sha256)
        ).scalar_one_or_none()

    def finished_before(self, cutoff: datetime, limit: int) -> Sequence[str]:
        query = (
            select(Job.id)
            .where(Job.status.in_(_FINISHED), Job.finished_at < cutoff)
            .order_by(Job.finished_at)
            .limit(limit)
        )
        return self.session.scalars(query).all()

    def team_bytes(self) -> dict[str, int]:
        """Per team: the sizes of its finished jobs' artifacts (a blob two jobs share counts for
        each). Running and queued jobs do not count: the cap can only delete finished ones."""
        query = (
            select(Job.team_id, func.sum(Artifact.size))
            .join(Artifact, Artifact.job_id == Job.id)
            .where(Job.status.in_(_FINISHED))
            .group_by(Job.team_id)
        )
        return {team: int(total or 0) for team, total in self.session.execute(query).all()}

    def finished_oldest_first(self, team_id: str, finished_before: datetime) -> list[tuple[str, int]]:
        """A team's jobs that finished before ``finished_before``, oldest first, each with the size
        of its artifacts."""
        query = (
            select(Job.id, func.coalesce(func.sum(Artifact.size), 0))
            .outerjoin(Artifact, Artifact.job_id == Job.id)
            .where(Job.team_id == team_id, Job.status.in_(_FINISHED), Job.finished_at < finished_before)
            .group_by(Job.id, Job.finished_at)
            .order_by(Job.finished_at, Job.id)
        )
        return [(job_id, int(size)) for job_id, size in self.session.execute(query).all()]

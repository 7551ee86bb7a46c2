"""Iterations: one row per check actually run, written *pending* before the check starts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from persistence.models import Iteration, utcnow


class IterationRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def start(self, job_id: str, phase: str, fingerprint: str, node_count: int) -> Iteration:
        """The pending row for a check about to run. A pending row of the same candidate left by a
        crashed attempt is reused (same number), so no iteration is recorded twice."""
        pending = self.session.scalar(select(Iteration).where(Iteration.job_id == job_id, Iteration.pending.is_(True)))
        if pending is not None and pending.fingerprint == fingerprint:
            pending.phase = phase
            return pending
        if pending is not None:
            self.session.delete(pending)
            self.session.flush()
        last = self.session.scalar(select(func.max(Iteration.number)).where(Iteration.job_id == job_id)) or 0
        row = Iteration(job_id=job_id, number=last + 1, phase=phase, fingerprint=fingerprint, node_count=node_count)
        self.session.add(row)
        self.session.flush()
        return row

    def get(self, iteration_id: int) -> Iteration:
        row = self.session.get(Iteration, iteration_id)
        assert row is not None
        return row

    def finish(self, row: Iteration, verdict: str, reproduces: bool, signature: str, detail: str) -> None:
        row.pending, row.verdict, row.reproduces = False, verdict, reproduces
        row.signature, row.detail, row.finished_at = signature, detail, utcnow()

    def drop_pending(self, job_id: str) -> None:
        self.session.execute(delete(Iteration).where(Iteration.job_id == job_id, Iteration.pending.is_(True)))

    def list(self, job_id: str, after: int = 0, limit: int = 100) -> Sequence[Iteration]:
        query = (
            select(Iteration)
            .where(Iteration.job_id == job_id, Iteration.number > after)
            .order_by(Iteration.number)
            .limit(limit)
        )
        return self.session.scalars(query).all()

    def by_number(self, job_id: str, number: int) -> Iteration | None:
        return self.session.scalar(select(Iteration).where(Iteration.job_id == job_id, Iteration.number == number))

    def best_failing(self, job_id: str) -> Iteration | None:
        """The smallest finished iteration that reproduced the original failure and kept its model
        (the earliest of equal size): a job's best model so far."""
        query = (
            select(Iteration)
            .where(
                Iteration.job_id == job_id,
                Iteration.pending.is_(False),
                Iteration.reproduces.is_(True),
                Iteration.artifact_id.is_not(None),
            )
            .order_by(Iteration.node_count, Iteration.number)
            .limit(1)
        )
        return self.session.scalar(query)

    def mean_duration(self, job_id: str) -> float | None:
        query = select(func.avg(Iteration.duration_s)).where(Iteration.job_id == job_id, Iteration.pending.is_(False))
        value = self.session.scalar(query)
        return float(value) if value is not None else None

    def pending_of(self, job_id: str) -> Iteration | None:
        """The check running now (its row is pending), if any."""
        return self.session.scalar(select(Iteration).where(Iteration.job_id == job_id, Iteration.pending.is_(True)))

    def finished_since(self, moment: datetime) -> int:
        """Checks finished after ``moment``, over all jobs."""
        return self.session.scalar(select(func.count()).where(Iteration.finished_at > moment)) or 0

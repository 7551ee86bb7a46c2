"""Iterations: one row per check run, written *pending* before the check starts, and one per
verdict answered without a check (``cached``: from the job's own verdicts or the farm's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from persistence.models import Artifact, Iteration, Job, Team, utcnow


@dataclass(frozen=True)
class CachedAnswer:
    """A verdict answered without a check; ``source``: ``job`` or ``farm``."""

    phase: str
    fingerprint: str
    node_count: int
    verdict: str
    reproduces: bool
    signature: str
    detail: str
    source: str


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
        number = self.next_number(job_id)
        row = Iteration(job_id=job_id, number=number, phase=phase, fingerprint=fingerprint, node_count=node_count)
        self.session.add(row)
        self.session.flush()
        return row

    def next_number(self, job_id: str) -> int:
        """The number the job's next recorded iteration takes (after its last row: no gap)."""
        return (self.session.scalar(select(func.max(Iteration.number)).where(Iteration.job_id == job_id)) or 0) + 1

    def add_cached(self, job_id: str, answer: CachedAnswer, number: int | None = None) -> Iteration:
        """A finished row for a verdict answered from a cache (no check, no model, no time);
        ``number``: its iteration number (default: after the last row)."""
        if number is None:
            number = self.next_number(job_id)
        row = Iteration(
            job_id=job_id,
            number=number,
            phase=answer.phase,
            fingerprint=answer.fingerprint,
            node_count=answer.node_count,
            pending=False,
            verdict=answer.verdict,
            reproduces=answer.reproduces,
            signature=answer.signature,
            detail=answer.detail,
            duration_s=0.0,
            cached=answer.source,
            finished_at=utcnow(),
        )
        self.session.add(row)
        self.session.flush()
        return row

    def fingerprints(self, job_id: str) -> set[str]:
        """The candidates the job has a finished row for."""
        query = select(Iteration.fingerprint).where(Iteration.job_id == job_id, Iteration.pending.is_(False))
        return set(self.session.scalars(query).all())

    def judged(self, job_id: str, fingerprint: str) -> Sequence[tuple[Iteration, Artifact | None]]:
        """The finished checks of ``fingerprint`` in this job (cached answers excluded), each with
        the model it checked (None when not stored): what a final model may reuse byte for byte."""
        query = (
            select(Iteration, Artifact)
            .outerjoin(Artifact, Artifact.id == Iteration.artifact_id)
            .where(
                Iteration.job_id == job_id,
                Iteration.fingerprint == fingerprint,
                Iteration.pending.is_(False),
                Iteration.cached.is_(None),
                Iteration.verdict.is_not(None),
            )
            .order_by(Iteration.number)
        )
        return [(row, artifact) for row, artifact in self.session.execute(query).all()]

    def all_reproduced(self, job_id: str) -> bool:
        """Whether every verdict of the job (cached ones too) reproduced the original failure: the
        evidence that the check may not depend on the model (``reducer_core.verification``)."""
        query = select(func.count()).where(
            Iteration.job_id == job_id,
            Iteration.pending.is_(False),
            Iteration.reproduces.is_not(True),
            Iteration.verdict != "infra-error",
        )
        return (self.session.scalar(query) or 0) == 0

    def get(self, iteration_id: int) -> Iteration:
        row = self.session.get(Iteration, iteration_id)
        assert row is not None
        return row

    def finish(self, row: Iteration, verdict: str, reproduces: bool, signature: str, detail: str) -> None:
        row.pending, row.verdict, row.reproduces = False, verdict, reproduces
        row.signature, row.detail, row.finished_at = signature, detail, utcnow()

    def take_pending(self, job_id: str, number: int) -> tuple[str, datetime] | None:
        """Take the pending iteration ``number`` for an answer (a conditional UPDATE: of two answers
        racing for it one gets it, the row lock held until the transaction ends): its fingerprint
        and when it was asked; None when it is not pending."""
        taken = self.session.execute(
            update(Iteration)
            .where(Iteration.job_id == job_id, Iteration.number == number, Iteration.pending.is_(True))
            .values(finished_at=utcnow())
            .returning(Iteration.fingerprint, Iteration.created_at)
        ).first()
        return None if taken is None else (taken[0], taken[1])

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

    def original(self, job_id: str) -> Iteration | None:
        """The finished check of the job's original model (the first, when re-run after a resume)."""
        query = (
            select(Iteration)
            .where(Iteration.job_id == job_id, Iteration.phase == "original", Iteration.pending.is_(False))
            .order_by(Iteration.number)
            .limit(1)
        )
        return self.session.scalar(query)

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

    def check_durations_since(self, moment: datetime) -> tuple[float, ...]:
        """How long each check (not a cached answer) finished after ``moment`` ran, in seconds."""
        query = select(Iteration.duration_s).where(
            Iteration.finished_at > moment, Iteration.cached.is_(None), Iteration.duration_s.is_not(None)
        )
        return tuple(float(d) for d in self.session.scalars(query).all() if d is not None)

    def finished_since(self, moment: datetime) -> dict[str, int]:
        """Checks (not cached answers) finished after ``moment``, per team name."""
        query = (
            select(Team.name, func.count())
            .select_from(Iteration)
            .join(Job, Job.id == Iteration.job_id)
            .join(Team, Team.id == Job.team_id)
            .where(Iteration.finished_at > moment, Iteration.cached.is_(None))
            .group_by(Team.name)
        )
        return {str(team): int(n) for team, n in self.session.execute(query).all()}

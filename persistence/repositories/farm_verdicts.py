"""Farm verdicts: verdicts shared across jobs (``worker/farm_cache.py`` decides what is shared and
under which scope). A team reads its own; ``every_team`` reads everyone's (the operator's choice).
A verdict follows the job whose check gave it: deleting the job (``persistence.retention``, by
hand or by retention) deletes its verdicts, so they answer no later job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from persistence.models import FarmVerdict, Team


@dataclass(frozen=True)
class SharedVerdict:
    fingerprint: str
    verdict: dict[str, Any]


class FarmVerdictRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, team_id: str, scope: str, fingerprint: str, verdict: dict[str, Any], job_id: str | None) -> bool:
        """Keep a verdict for the team; one already kept for the same candidate stays (the first
        verdict wins, as in a job's own cache). True when this one was added. (One statement,
        built once per dialect: a worker shares a verdict at every check.)"""
        values = {"team_id": team_id, "scope": scope, "fingerprint": fingerprint, "verdict": verdict, "job_id": job_id}
        connection = self.session.connection()
        return connection.execute(_ADD[connection.dialect.name], values).first() is not None

    def forget_job(self, job_id: str) -> int:
        """Delete the verdicts the job's checks shared (the job is being deleted); how many."""
        result = self.session.execute(delete(FarmVerdict).where(FarmVerdict.job_id == job_id))
        return int(getattr(result, "rowcount", 0) or 0)

    def prune_orphans(self) -> int:
        """Delete the verdicts whose job is gone (an older version kept them, ``job_id`` NULL, when
        their job was deleted); how many."""
        result = self.session.execute(delete(FarmVerdict).where(FarmVerdict.job_id.is_(None)))
        return int(getattr(result, "rowcount", 0) or 0)

    def known(self, scope: str, team_id: str, every_team: bool = False) -> list[SharedVerdict]:
        """The verdicts kept under ``scope``: the team's, or (``every_team``) every team's, one per
        candidate (the team's own first, then the oldest)."""
        query = select(FarmVerdict.fingerprint, FarmVerdict.verdict).where(FarmVerdict.scope == scope)
        if not every_team:
            query = query.where(FarmVerdict.team_id == team_id)
        own_first = (FarmVerdict.team_id != team_id).asc()
        rows = self.session.execute(query.order_by(own_first, FarmVerdict.id)).all()
        seen: dict[str, SharedVerdict] = {}
        for fingerprint, verdict in rows:
            seen.setdefault(fingerprint, SharedVerdict(fingerprint, dict(verdict)))
        return list(seen.values())

    def counts_by_team(self) -> dict[str, int]:
        """Verdicts kept per team name (a metric)."""
        query = (
            select(Team.name, func.count())
            .select_from(FarmVerdict)
            .join(Team, Team.id == FarmVerdict.team_id)
            .group_by(Team.name)
        )
        return {str(name): int(n) for name, n in self.session.execute(query).all()}


def _add(insert: Any) -> Any:
    added = insert(FarmVerdict).on_conflict_do_nothing(index_elements=["team_id", "scope", "fingerprint"])
    return added.returning(FarmVerdict.id)


_ADD = {"postgresql": _add(postgresql_insert), "sqlite": _add(sqlite_insert)}

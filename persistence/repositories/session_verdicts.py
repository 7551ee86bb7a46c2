"""A job's verdict cache, one row an entry (``persistence.models.SessionVerdict``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from persistence.models import SessionVerdict


class SessionVerdictRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def of_job(self, job_id: str) -> dict[str, dict[str, Any]]:
        """The job's cache entries: key -> the verdict's JSON."""
        query = select(SessionVerdict.key, SessionVerdict.verdict).where(SessionVerdict.job_id == job_id)
        return {key: verdict for key, verdict in self.session.execute(query).all()}

    def since(self, job_id: str, after: int) -> tuple[dict[str, dict[str, Any]], int]:
        """The job's entries stored after row ``after`` (0: all; ids grow in the order the job's
        transactions wrote them, each under the job's row lock) and the last row's id (``after``
        when none): what a session kept live since row ``after`` has not seen
        (``jobflow.stored_state.catch_up``)."""
        query = (
            select(SessionVerdict.id, SessionVerdict.key, SessionVerdict.verdict)
            .where(SessionVerdict.job_id == job_id, SessionVerdict.id > after)
            .order_by(SessionVerdict.id)
        )
        rows = self.session.execute(query).all()
        return {key: verdict for _, key, verdict in rows}, (rows[-1][0] if rows else after)

    def put(self, job_id: str, verdicts: Mapping[str, dict[str, Any]]) -> None:
        """Store entries (one statement, built once per dialect); an entry stored before under the
        same key is replaced."""
        if not verdicts:
            return
        rows = [{"job_id": job_id, "key": key, "verdict": verdict} for key, verdict in verdicts.items()]
        connection = self.session.connection()
        connection.execute(_PUT[connection.dialect.name], rows)


def _put(insert: Any) -> Any:
    statement = insert(SessionVerdict)
    return statement.on_conflict_do_update(
        index_elements=["job_id", "key"], set_={"verdict": statement.excluded.verdict}
    )


_PUT = {"postgresql": _put(postgresql_insert), "sqlite": _put(sqlite_insert)}

"""A team's audit record (``audit_events``): token and deletion events, newest first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from persistence.models import AuditEvent

TOKEN_CREATED, TOKEN_REVOKED, JOB_DELETED = "token.created", "token.revoked", "job.deleted"
CLI_ACTOR = "cli"  # the server's command line (`onnx-reducer token ...`)
RETENTION_ACTOR = "retention"  # the workers' retention rules


def token_actor(token: str) -> str:
    """How a request's token is named in the record: its prefix, as ``token list`` shows it."""
    return f"token {token[:12]}"


class AuditRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, team_id: str, action: str, actor: str, target: str, detail: dict[str, Any] | None = None) -> None:
        self.session.add(
            AuditEvent(team_id=team_id, action=action, actor=actor[:120], target=target[:200], detail=detail or {})
        )

    def page(self, team_id: str, limit: int, before: int | None = None) -> Sequence[AuditEvent]:
        """The team's events, newest first; ``before``: only those with a smaller id (the next page)."""
        query = select(AuditEvent).where(AuditEvent.team_id == team_id)
        if before is not None:
            query = query.where(AuditEvent.id < before)
        return self.session.scalars(query.order_by(AuditEvent.id.desc()).limit(limit)).all()

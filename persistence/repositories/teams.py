"""Teams and their API tokens (stored as sha256 hashes; the token itself is shown once)."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from persistence.models import ApiToken, Team

TOKEN_PREFIX = "orx_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TeamRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get_or_create(self, name: str) -> Team:
        team = self.session.scalar(select(Team).where(Team.name == name))
        if team is None:
            team = Team(name=name)
            self.session.add(team)
            self.session.flush()
        return team

    def name_of(self, team_id: str) -> str:
        return self.session.scalar(select(Team.name).where(Team.id == team_id)) or team_id

    def count(self) -> int:
        return len(self.session.scalars(select(Team.id)).all())

    def create_token(self, team: Team) -> str:
        """A new random token for ``team``; only its hash is stored."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.session.add(ApiToken(team_id=team.id, token_hash=hash_token(token), prefix=token[:12]))
        self.session.flush()
        return token

    def team_for_token(self, token: str) -> Team | None:
        query = (
            select(Team)
            .join(ApiToken, ApiToken.team_id == Team.id)
            .where(ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None))
        )
        return self.session.scalar(query)

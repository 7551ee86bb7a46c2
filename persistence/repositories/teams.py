"""Teams and their API tokens (stored as sha256 hashes; the token itself is shown once)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from persistence.models import ApiToken, Team, utcnow

TOKEN_PREFIX = "orx_"
MAX_TOKEN_NAME = 100  # api_tokens.name


@dataclass(frozen=True)
class TokenInfo:
    """What ``token list`` shows of a token (never the token: only its first characters)."""

    prefix: str
    team: str
    created_at: datetime
    revoked_at: datetime | None
    admin: bool = False  # a team admin token (manages the team's tokens)


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

    def create_token(self, team: Team, *, name: str = "", admin: bool = False) -> str:
        """A new random token for ``team``; only its hash is stored. ``admin``: it manages the
        team's tokens and reads its audit record."""
        return self.add_token(team.id, name=name, admin=admin)[1]

    def add_token(self, team_id: str, *, name: str = "", admin: bool = False) -> tuple[ApiToken, str]:
        """The new token's row and the token itself (shown once, never stored)."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        row = ApiToken(team_id=team_id, token_hash=hash_token(token), prefix=token[:12], name=name, admin=admin)
        self.session.add(row)
        self.session.flush()
        return row, token

    def token_row(self, token: str) -> ApiToken | None:
        """The unrevoked token's row (``None``: unknown or revoked)."""
        return self.session.scalar(
            select(ApiToken).where(ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None))
        )

    def team_tokens(self, team_id: str) -> list[ApiToken]:
        """The team's tokens, revoked ones too, oldest first."""
        query = select(ApiToken).where(ApiToken.team_id == team_id).order_by(ApiToken.created_at, ApiToken.id)
        return list(self.session.scalars(query))

    def team_token(self, team_id: str, token_id: str) -> ApiToken | None:
        return self.session.scalar(select(ApiToken).where(ApiToken.team_id == team_id, ApiToken.id == token_id))

    def team_for_token(self, token: str) -> Team | None:
        query = (
            select(Team)
            .join(ApiToken, ApiToken.team_id == Team.id)
            .where(ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None))
        )
        return self.session.scalar(query)

    def tokens(self) -> list[TokenInfo]:
        rows = self.session.execute(
            select(ApiToken.prefix, Team.name, ApiToken.created_at, ApiToken.revoked_at, ApiToken.admin)
            .join(Team, Team.id == ApiToken.team_id)
            .order_by(ApiToken.created_at, ApiToken.id)
        ).all()
        return [TokenInfo(*row) for row in rows]

    def matching(self, token_or_prefix: str) -> list[ApiToken]:
        """The unrevoked tokens a whole token or its prefix (as ``tokens`` shows it) names."""
        if len(token_or_prefix) > 16:
            condition = ApiToken.token_hash == hash_token(token_or_prefix)
        else:
            condition = ApiToken.prefix == token_or_prefix
        return list(self.session.scalars(select(ApiToken).where(condition, ApiToken.revoked_at.is_(None))))

    def revoke(self, token_id: str) -> None:
        self.session.execute(update(ApiToken).where(ApiToken.id == token_id).values(revoked_at=utcnow()))

"""``GET /v1/me``: the team behind the token and what this server allows (the web page's sign-in
check and its new-job form)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from api.deps import ServicesDep, TeamDep

router = APIRouter(prefix="/v1", tags=["session"])


class ServerInfo(BaseModel):
    allow_command_checks: bool
    max_upload_bytes: int


class Me(BaseModel):
    team: str
    server: ServerInfo


@router.get("/me", response_model=Me)
def who_am_i(services: ServicesDep, team: TeamDep) -> Me:
    """The token's team, and the server's upload limit and whether it runs `kind: command` checks."""
    settings = services.settings
    return Me(
        team=team.name,
        server=ServerInfo(
            allow_command_checks=settings.allow_command_checks, max_upload_bytes=settings.max_upload_bytes
        ),
    )

"""FastAPI dependencies as ``Annotated`` aliases: the services, and the team behind the bearer token."""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.problems import ProblemError
from api.services import Services
from persistence.models import Team
from persistence.repositories import TeamRepository

_bearer = HTTPBearer(auto_error=False, description="A team's API token (`onnx-reducer token create --team NAME`).")


_CHALLENGE = {"WWW-Authenticate": "Bearer"}


async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def _team_for_token(services: Services, token: str) -> Team | None:
    with services.db.session() as session:
        return TeamRepository(session).team_for_token(token)


async def current_team(
    services: ServicesDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Team:
    """The token's team, from the database at most every ``TOKEN_CACHE_S`` per token (a revoked
    token is refused within that time; open event streams re-check it themselves)."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ProblemError(401, "Unauthorized", "Send 'Authorization: Bearer <token>'.", headers=_CHALLENGE)
    token = credentials.credentials
    team = services.tokens.get(token)
    if team is None:
        team = await anyio.to_thread.run_sync(_team_for_token, services, token)
        if team is not None:
            services.tokens.put(token, team)
    if team is None:
        raise ProblemError(
            401, "Unauthorized", "This API token is not valid (revoked or never issued).", headers=_CHALLENGE
        )
    return team


TeamDep = Annotated[Team, Depends(current_team)]

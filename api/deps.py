"""FastAPI dependencies as ``Annotated`` aliases: the services, and the team behind the bearer token."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.problems import ProblemError
from api.services import Services
from persistence.models import Team
from persistence.repositories import TeamRepository

_bearer = HTTPBearer(auto_error=False, description="A team's API token (`onnx-reducer token create --team NAME`).")


_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def current_team(
    services: ServicesDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Team:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ProblemError(401, "Unauthorized", "Send 'Authorization: Bearer <token>'.", headers=_CHALLENGE)
    with services.db.session() as session:
        team = TeamRepository(session).team_for_token(credentials.credentials)
    if team is None:
        raise ProblemError(
            401, "Unauthorized", "This API token is not valid (revoked or never issued).", headers=_CHALLENGE
        )
    return team


TeamDep = Annotated[Team, Depends(current_team)]

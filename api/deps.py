"""FastAPI dependencies as ``Annotated`` aliases: the services, and the team behind the bearer token."""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.problems import ProblemError, not_found
from api.services import Services
from persistence.models import ApiToken, Team
from persistence.repositories import TeamRepository
from persistence.repositories.audit import token_actor

_bearer = HTTPBearer(auto_error=False, description="A team's API token (`onnx-reducer token create --team NAME`).")


_CHALLENGE = {"WWW-Authenticate": "Bearer"}


async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def _team_for_token(services: Services, token: str) -> Team | None:
    with services.db.session() as session:
        return TeamRepository(session).team_for_token(token)


MAX_PATH_ID = 200  # a job id or an artifact name in the address longer than this names nothing


def check_path_ids(request: Request) -> None:
    """The ids in the address (``{job_id}``, an artifact's ``{name}``): one holding a control
    character (a NUL, which PostgreSQL refuses in any string) or far too long names nothing, so
    the route answers 404 before the database is asked."""
    for key, value in request.path_params.items():
        if isinstance(value, str) and (len(value) > MAX_PATH_ID or not value.isprintable()):
            shown = value[:40].encode("unicode_escape").decode("ascii")
            what = "Job" if key == "job_id" else key.replace("_", " ").capitalize()
            raise not_found(f"{what} '{shown}'")


async def current_team(
    request: Request,
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Team:
    """The token's team, from the database at most every ``TOKEN_CACHE_S`` per token (a revoked
    token is refused within that time; open event streams re-check it themselves). Every route
    of a team's data depends on it, so the ids in its address are checked here too
    (``check_path_ids``)."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ProblemError(401, "Unauthorized", "Send 'Authorization: Bearer <token>'.", headers=_CHALLENGE)
    check_path_ids(request)
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


async def current_actor(
    team: TeamDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    """How the team's audit record names whoever sends this request: its token's prefix."""
    assert credentials is not None  # current_team refused a request without one
    return token_actor(credentials.credentials)


ActorDep = Annotated[str, Depends(current_actor)]


def _token_row(services: Services, token: str) -> ApiToken | None:
    with services.db.session() as session:
        return TeamRepository(session).token_row(token)


async def admin_token(
    team: TeamDep,
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiToken:
    """The request's token when it is a team admin token (read from the database, not the cache:
    a token revoked a moment ago manages nothing); 403 for a team's ordinary token."""
    assert credentials is not None
    row = await anyio.to_thread.run_sync(_token_row, services, credentials.credentials)
    if row is None:
        raise ProblemError(
            401, "Unauthorized", "This API token is not valid (revoked or never issued).", headers=_CHALLENGE
        )
    if not row.admin:
        raise ProblemError(
            403,
            "Not a team admin",
            f"Only a team admin token manages team {team.name}'s tokens and reads its audit record; an operator "
            f"creates one with `onnx-reducer token create --team {team.name} --admin`.",
        )
    return row


AdminDep = Annotated[ApiToken, Depends(admin_token)]

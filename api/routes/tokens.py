"""A team's tokens, managed by a team admin token (``onnx-reducer token create --team NAME
--admin``): ``GET/POST /v1/tokens``, ``DELETE /v1/tokens/{id}`` (revoke; the token is refused
within ``TOKEN_CACHE_S``), and the team's audit record, ``GET /v1/audit`` (tokens created and
revoked, jobs deleted: by whom and when). A new token is shown once, in the answer that creates it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from api.deps import AdminDep, ServicesDep
from api.problems import not_found
from persistence.models import ApiToken, AuditEvent, utcnow
from persistence.repositories import TeamRepository
from persistence.repositories.audit import TOKEN_CREATED, TOKEN_REVOKED, AuditRepository
from persistence.repositories.teams import MAX_TOKEN_NAME

router = APIRouter(prefix="/v1", tags=["team"])


class TokenOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # built from an ApiToken row

    id: str
    prefix: str  # the token's first characters (as `onnx-reducer token list` shows them)
    name: str
    admin: bool
    created_at: datetime
    revoked_at: datetime | None


class TokenList(BaseModel):
    items: list[TokenOut]


class TokenIn(BaseModel):
    name: str = Field("", max_length=MAX_TOKEN_NAME, description="what the token is for")
    admin: bool = Field(False, description="a team admin token (manages tokens, reads the audit record)")


class TokenCreated(TokenOut):
    token: str  # shown once: only its hash is stored


class AuditOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # built from an AuditEvent row

    id: int
    action: str  # token.created | token.revoked | job.deleted
    actor: str  # "token orx_AbCdEfGh", "cli" (the server's command line) or "retention"
    target: str  # the token's prefix, or the job's id
    detail: dict[str, Any]
    created_at: datetime


class AuditList(BaseModel):
    items: list[AuditOut]
    next_before: int | None  # pass as ?before= for the older events


def _token_out(row: ApiToken) -> TokenOut:
    return TokenOut.model_validate(row)


def _audit_out(row: AuditEvent) -> AuditOut:
    return AuditOut.model_validate(row)


@router.get("/tokens", response_model=TokenList)
def list_tokens(services: ServicesDep, admin: AdminDep) -> TokenList:
    """The team's tokens, revoked ones too, oldest first (never the tokens: their prefixes)."""
    with services.db.session() as session:
        return TokenList(items=[_token_out(row) for row in TeamRepository(session).team_tokens(admin.team_id)])


@router.post("/tokens", status_code=201, response_model=TokenCreated)
def create_token(body: TokenIn, services: ServicesDep, admin: AdminDep) -> TokenCreated:
    """A new token of the team; the answer is the only place it is ever shown."""
    with services.db.session() as session:
        row, token = TeamRepository(session).add_token(admin.team_id, name=body.name.strip(), admin=body.admin)
        detail = {"prefix": row.prefix, "name": row.name, "admin": row.admin}
        AuditRepository(session).add(admin.team_id, TOKEN_CREATED, f"token {admin.prefix}", row.prefix, detail)
        return TokenCreated(**_token_out(row).model_dump(), token=token)


@router.delete("/tokens/{token_id}", status_code=204)
def revoke_token(token_id: str, services: ServicesDep, admin: AdminDep) -> Response:
    """Revoke one of the team's tokens (204; again: 204, nothing changes; 404: not the team's).
    Requests with it are refused within ``TOKEN_CACHE_S``; its open event streams end too."""
    with services.db.session() as session:
        row = TeamRepository(session).team_token(admin.team_id, token_id[:40])
        if row is None:
            raise not_found(f"Token '{token_id[:40]}'")
        if row.revoked_at is None:
            row.revoked_at = utcnow()
            AuditRepository(session).add(admin.team_id, TOKEN_REVOKED, f"token {admin.prefix}", row.prefix)
    return Response(status_code=204)


@router.get("/audit", response_model=AuditList)
def audit_record(
    services: ServicesDep,
    admin: AdminDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    before: Annotated[int | None, Query(ge=1)] = None,
) -> AuditList:
    """The team's audit record, newest first: tokens created and revoked, jobs deleted."""
    with services.db.session() as session:
        rows = AuditRepository(session).page(admin.team_id, limit, before)
        items = [_audit_out(row) for row in rows]
    return AuditList(items=items, next_before=items[-1].id if len(items) == limit else None)

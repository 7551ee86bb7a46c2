"""Liveness (no dependencies), readiness (database, Redis, data folder, the S3 bucket when artifacts
live in one) and Prometheus metrics."""

from __future__ import annotations

import hmac
from typing import Annotated, Any

import anyio
import redis
from fastapi import APIRouter, Header, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from api.deps import ServicesDep
from api.metrics import team_neutral_registry
from api.problems import problem_response
from api.services import Services
from persistence.s3store import S3ArtifactStore

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _readiness(services: Services) -> dict[str, str]:
    checks: dict[str, str] = {}
    try:
        services.db.ping()
        checks["database"] = "ok"
    except SQLAlchemyError as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    if services.settings.redis_url:
        try:
            redis.Redis.from_url(services.settings.redis_url, socket_timeout=2).ping()
            checks["redis"] = "ok"
        except redis.RedisError as exc:
            checks["redis"] = f"error: {type(exc).__name__}"
    store = services.layout.store
    checks["data_dir"] = "ok" if store.tmp_dir.is_dir() else "error: missing"
    if isinstance(store, S3ArtifactStore):
        checks["artifact_store"] = store.ready()
    return checks


@router.get("/readyz", response_model=None)
async def readyz(services: ServicesDep) -> Any:
    checks = await anyio.to_thread.run_sync(_readiness, services)
    if all(v == "ok" for v in checks.values()):
        return {"status": "ok", "checks": checks}
    failing = ", ".join(f"{k} ({v})" for k, v in checks.items() if v != "ok")
    return problem_response(503, "Not ready", f"Dependencies not ready: {failing}.", checks=checks)


@router.get("/metrics", response_class=Response, response_model=None)
def metrics(services: ServicesDep, authorization: Annotated[str | None, Header()] = None) -> Response:
    """Prometheus metrics. With ``Authorization: Bearer METRICS_TOKEN``: every series, per team;
    without: the team-neutral view (team labels summed away); a wrong or unset-on-server token: 401."""
    if authorization is None:
        return Response(generate_latest(team_neutral_registry(services.registry)), media_type=CONTENT_TYPE_LATEST)
    scheme, _, given = authorization.partition(" ")
    expected = services.settings.metrics_token
    if scheme.lower() != "bearer" or not expected or not hmac.compare_digest(given.strip(), expected):
        return problem_response(
            401,
            "Unauthorized",
            "Wrong metrics token: send 'Authorization: Bearer <METRICS_TOKEN>' (the api's setting), or no "
            "Authorization header for the team-neutral view.",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return Response(generate_latest(services.registry), media_type=CONTENT_TYPE_LATEST)

"""RFC 9457 problem details: every error the api returns is ``application/problem+json``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from persistence.retry import is_conflict
from persistence.store import ArtifactStoreError

PROBLEM_JSON = "application/problem+json"
DATABASE_RETRY_AFTER_S = 5
STORE_RETRY_AFTER_S = 5
CONFLICT_RETRY_AFTER_S = 1
DRAIN_LIMIT_BYTES = 8 * 1024 * 1024  # read (and drop) this much of a refused upload, so the client sees the answer
log = logging.getLogger("onnx_reducer.api")


class ProblemError(Exception):
    """Raise anywhere in a request to answer with a problem document."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        type_: str = "about:blank",
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail, self.type, self.extra = status, title, detail, type_, extra
        self.headers = headers


def field_errors(field: str, message: str) -> list[dict[str, str]]:
    """The ``errors`` extension member: which form field a problem concerns (the web page shows the
    message next to that field)."""
    return [{"field": field, "message": message}]


@contextmanager
def about_field(field: str) -> Iterator[None]:
    """A problem raised inside (without ``errors`` of its own) concerns the form field ``field``."""
    try:
        yield
    except ProblemError as exc:
        exc.extra.setdefault("errors", field_errors(field, exc.detail))
        raise


def not_found(what: str) -> ProblemError:
    return ProblemError(404, "Not Found", f"{what} was not found.")


def problem_response(
    status: int,
    title: str,
    detail: str,
    type_: str = "about:blank",
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = {"type": type_, "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


async def _problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return problem_response(
        exc.status, exc.title, exc.detail, exc.type, exc.headers, instance=request.url.path, **exc.extra
    )


async def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers) if exc.headers else None
    title = {401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed"}.get(exc.status_code, "Error")
    return problem_response(exc.status_code, title, str(exc.detail), headers=headers, instance=request.url.path)


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", ""))} for e in exc.errors()]
    detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors)
    return problem_response(422, "Invalid request", detail, instance=request.url.path, errors=errors)


async def _drain(request: Request) -> None:
    """Read what is left of the request body (up to a limit): a client still sending an upload
    would otherwise see its connection reset instead of the answer."""
    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > DRAIN_LIMIT_BYTES:
                return
    except Exception:  # noqa: BLE001 - already read, or the client left: nothing to drain
        return


async def _try_again_later(request: Request, status: int, title: str, detail: str, retry_after_s: int) -> JSONResponse:
    """A problem the client should send again after retry_after_s (a conflict or an outage): what is
    left of its upload is drained first, so it sees this answer."""
    await _drain(request)
    return problem_response(
        status, title, detail, headers={"Retry-After": str(retry_after_s)}, instance=request.url.path
    )


async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    if is_conflict(exc):  # a deadlock or serialisation failure that outlived its retries: no outage
        log.warning("transaction conflict on %s %s outlived its retries", request.method, request.url.path)
        return await _try_again_later(
            request,
            409,
            "Concurrent change",
            "Another request changed this job at the same moment; send the request again.",
            CONFLICT_RETRY_AFTER_S,
        )
    text = str(getattr(exc, "orig", None) or exc).strip()
    reason = text.splitlines()[0][:200] if text else type(exc).__name__
    log.warning("database unavailable on %s %s: %s", request.method, request.url.path, reason)
    return await _try_again_later(
        request,
        503,
        "Database unavailable",
        "The service cannot reach its database at the moment; try again in a few seconds.",
        DATABASE_RETRY_AFTER_S,
    )


async def _store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """The object store (S3) refused or could not be reached, e.g. while it restarts: a 503 to try
    again, not a 500 (its message names the endpoint: logged, not answered). A corrupt blob is no
    outage: a 500."""
    if not getattr(exc, "transient", False):
        return await _unexpected(request, exc)
    log.warning("artifact store unavailable on %s %s: %s", request.method, request.url.path, exc)
    return await _try_again_later(
        request,
        503,
        "Artifact store unavailable",
        "The service cannot reach its artifact store at the moment; try again in a few seconds.",
        STORE_RETRY_AFTER_S,
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s", request.url.path, exc_info=exc)
    return problem_response(500, "Internal Server Error", "An unexpected error occurred.", instance=request.url.path)


def install_problem_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ProblemError, _problem)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(RequestValidationError, _validation)
    for unavailable in (OperationalError, InterfaceError, PoolTimeoutError):
        app.add_exception_handler(unavailable, _database_unavailable)
    app.add_exception_handler(ArtifactStoreError, _store_unavailable)
    app.add_exception_handler(Exception, _unexpected)

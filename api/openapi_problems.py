"""The error answers of the ``/v1`` API in its OpenAPI document: every operation lists the RFC 9457
``application/problem+json`` answers it can give (401 without a valid token, 404 for a job or
artifact that is not the team's, 409 for a state conflict, 413/415/400 for an upload, 422 for
invalid input, 503 when the database is away or the api sheds load), each with the ``Problem``
schema. Added once to the generated document, so the routes keep only what is theirs."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from api.problems import PROBLEM_JSON

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "description": "An error answer (RFC 9457). Problems about one field of `POST /v1/jobs` name it in `errors`.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "description": "A URI naming the problem; `about:blank` by default."},
        "title": {"type": "string", "description": "Short, the same for every occurrence, e.g. `Invalid model`."},
        "status": {"type": "integer", "description": "The HTTP status code."},
        "detail": {"type": "string", "description": "What went wrong and how to fix it."},
        "instance": {"type": "string", "description": "The request's path."},
        "errors": {
            "type": "array",
            "description": "The form fields concerned (`POST /v1/jobs`), or the request's invalid parts.",
            "items": {"type": "object", "additionalProperties": True},
        },
    },
    "additionalProperties": True,
}

_WHY = {
    400: "Malformed request body (a multipart body that cannot be parsed, or too many parts).",
    401: "No token, or a token that is not valid (revoked or never issued). Header `WWW-Authenticate: Bearer`.",
    404: "No such job, artifact or webhook for this team (another team's are not found either).",
    409: "The job's state does not allow it (e.g. cancel a finished job, retry a job that did not fail).",
    413: "The upload (or one form field) is larger than this server takes (`MAX_UPLOAD_BYTES`).",
    415: "The body is not multipart/form-data.",
    422: "Invalid input: the model, check spec, golden values, mode or an option; `errors` names the field.",
    503: "The database is unavailable, the api is shedding load, or too many uploads are being validated; "
    "retry after `Retry-After` seconds.",
}

# Codes beyond 401/422/503 (every /v1 operation), by (method, path).
_EXTRA: dict[tuple[str, str], tuple[int, ...]] = {
    ("post", "/v1/jobs"): (400, 413, 415),
    ("post", "/v1/jobs/{job_id}/cancel"): (404, 409),
    ("post", "/v1/jobs/{job_id}/retry"): (404, 409),
    ("post", "/v1/jobs/{job_id}/verdict"): (404, 409),
    ("post", "/v1/webhooks"): (409,),  # the team has as many webhooks as it may
}


def _codes(method: str, path: str) -> tuple[int, ...]:
    codes = {401, 422, 503, *_EXTRA.get((method, path), ())}
    if "{job_id}" in path or "{webhook_id}" in path:
        codes.add(404)
    return tuple(sorted(codes))


def add_problem_responses(schema: dict[str, Any]) -> None:
    """Document the problem answers of every ``/v1`` operation of ``schema`` (in place)."""
    schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
    reference = {"$ref": "#/components/schemas/Problem"}
    for path, operations in schema.get("paths", {}).items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for code in _codes(method, path):
                responses[str(code)] = {"description": _WHY[code], "content": {PROBLEM_JSON: {"schema": reference}}}


def install_problem_docs(app: FastAPI) -> None:
    """``app.openapi()`` returns the generated document with the problem answers added."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            add_problem_responses(generate())  # generate() caches the document in app.openapi_schema
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

"""The errors the client raises. An answer the server refused carries its RFC 9457 problem
document (``type``, ``title``, ``detail``, ``status``, and any extra members)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_PROBLEM_MEMBERS = ("type", "title", "status", "detail", "instance")


@dataclass(frozen=True)
class Problem:
    """An RFC 9457 problem document (``application/problem+json``)."""

    status: int
    title: str
    detail: str
    type: str = "about:blank"
    instance: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_body(cls, status: int, body: object, reason: str = "") -> Problem:
        """The problem in a response body; a body that is not one (a proxy's HTML page) still gives
        a problem with the HTTP status and reason."""
        if not isinstance(body, dict):
            text = str(body).strip()[:300] if body else ""
            return cls(status=status, title=reason or f"HTTP {status}", detail=text or reason or f"HTTP {status}")
        extra = {k: v for k, v in body.items() if k not in _PROBLEM_MEMBERS}
        raw_status = body.get("status")
        return cls(
            status=raw_status if isinstance(raw_status, int) else status,
            title=str(body.get("title") or reason or f"HTTP {status}"),
            detail=str(body.get("detail") or ""),
            type=str(body.get("type") or "about:blank"),
            instance=str(body["instance"]) if body.get("instance") else None,
            extra=extra,
        )

    def __str__(self) -> str:
        return f"{self.title}: {self.detail}" if self.detail else self.title


class ReducerClientError(Exception):
    """Every error of the client."""


class ApiError(ReducerClientError):
    """The server answered with an error status; ``problem`` says what and why."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(f"{problem} (HTTP {problem.status})")
        self.problem = problem

    @property
    def status(self) -> int:
        return self.problem.status


class AuthError(ApiError):
    """401/403: the token is missing, revoked or not allowed."""


class NotFoundError(ApiError):
    """404: no such job or artifact (another team's job answers 404 too)."""


class ServerUnreachableError(ReducerClientError):
    """No answer after the retries: connection errors, or 502/503/504 from a gateway."""


class WaitTimeoutError(ReducerClientError):
    """The job had not ended when the wait's time limit passed (it keeps running on the server)."""

    def __init__(self, job_id: str, timeout_s: float) -> None:
        super().__init__(f"job {job_id} was still running after {timeout_s:g}s")
        self.job_id, self.timeout_s = job_id, timeout_s


class ModelBundleError(ReducerClientError):
    """A model's external-data files cannot be bundled (missing, or outside the model's folder)."""

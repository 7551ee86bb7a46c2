"""Typed views of the service's JSON answers (jobs, iterations, events)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
TERMINAL_EVENTS = frozenset({"job.succeeded", "job.failed", "job.cancelled"})


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _float_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True)
class Progress:
    iteration: int
    best_size: int | None
    checks_run: int
    check_time_s: float
    mean_check_s: float | None
    eta_s: float | None
    cache_hits: int = 0  # verdicts answered without a check
    farm_cache_hits: int = 0  # of those, from earlier jobs' verdicts (the farm cache)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Progress:
        return cls(
            iteration=int(data.get("iteration") or 0),
            best_size=_int_or_none(data.get("best_size")),
            checks_run=int(data.get("checks_run") or 0),
            check_time_s=float(data.get("check_time_s") or 0.0),
            mean_check_s=_float_or_none(data.get("mean_check_s")),
            eta_s=_float_or_none(data.get("eta_s")),
            cache_hits=int(data.get("cache_hits") or 0),
            farm_cache_hits=int(data.get("farm_cache_hits") or 0),
        )


@dataclass(frozen=True)
class JobError:
    """Why a job failed: ``code`` is one of the service's error codes (e.g. ``original-did-not-fail``)."""

    code: str
    message: str | None


@dataclass(frozen=True)
class Job:
    id: str
    status: str
    mode: str
    check_kind: str
    nodes_before: int | None
    nodes_after: int | None
    progress: Progress
    error: JobError | None
    attempts: int
    model_filename: str
    created_at: str
    finished_at: str | None
    links: dict[str, str]
    raw: dict[str, Any]
    flaky: dict[str, Any] | None = None  # the check's estimated failure rate, when it proved flaky
    task: str = "reduce"  # or "precision": which nodes must stay fp32
    keep_fp32: list[str] | None = None  # a succeeded precision job's answer
    verified: dict[str, Any] | None = None  # a finished reduce job: how each final model was verified
    suspect: dict[str, Any] | None = None  # the check fails whatever the model: {message, output, ...}
    labels: dict[str, str] = field(default_factory=dict)  # the CI context and --label pairs it was sent with
    passes: dict[str, Any] | None = None  # a bisect-passes job's answer (or its probes so far)
    releases: dict[str, Any] | None = None  # a bisect-releases job's answer (or its strip so far)

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        error = data.get("error")
        model = data.get("model") or {}
        return cls(
            id=str(data["id"]),
            status=str(data["status"]),
            mode=str(data.get("mode", "")),
            check_kind=str(data.get("check_kind", "")),
            nodes_before=_int_or_none(data.get("nodes_before")),
            nodes_after=_int_or_none(data.get("nodes_after")),
            progress=Progress.from_json(data.get("progress") or {}),
            error=JobError(str(error.get("code", "")), error.get("message")) if isinstance(error, dict) else None,
            attempts=int(data.get("attempts") or 0),
            model_filename=str(model.get("filename", "")),
            created_at=str(data.get("created_at", "")),
            finished_at=data.get("finished_at"),
            links=dict(data.get("links") or {}),
            raw=data,
            flaky=data["flaky"] if isinstance(data.get("flaky"), dict) else None,
            task=str(data.get("task") or "reduce"),
            keep_fp32=[str(n) for n in data["keep_fp32"]] if isinstance(data.get("keep_fp32"), list) else None,
            verified=data["verified"] if isinstance(data.get("verified"), dict) else None,
            suspect=data["suspect"] if isinstance(data.get("suspect"), dict) else None,
            labels={str(k): str(v) for k, v in (data.get("labels") or {}).items()},
            passes=data["passes"] if isinstance(data.get("passes"), dict) else None,
            releases=data["releases"] if isinstance(data.get("releases"), dict) else None,
        )


@dataclass(frozen=True)
class JobPage:
    items: list[Job]
    next_cursor: str | None


@dataclass(frozen=True)
class Iteration:
    number: int
    phase: str
    fingerprint: str
    nodes: int
    pending: bool
    verdict: str | None
    reproduces: bool | None
    duration_s: float | None
    detail: str | None
    output_tail: str | None
    artifact: str | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Iteration:
        return cls(
            number=int(data["number"]),
            phase=str(data.get("phase", "")),
            fingerprint=str(data.get("fingerprint", "")),
            nodes=int(data.get("nodes") or 0),
            pending=bool(data.get("pending")),
            verdict=data.get("verdict"),
            reproduces=data.get("reproduces"),
            duration_s=_float_or_none(data.get("duration_s")),
            detail=data.get("detail"),
            output_tail=data.get("output_tail"),
            artifact=data.get("artifact"),
        )


@dataclass(frozen=True)
class IterationPage:
    items: list[Iteration]
    next_after: int | None


@dataclass(frozen=True)
class Event:
    """One server-sent event: ``id`` is the job's event sequence number (``Last-Event-ID``)."""

    id: int
    kind: str
    data: dict[str, Any]

    @property
    def terminal(self) -> bool:
        return self.kind in TERMINAL_EVENTS


@dataclass(frozen=True)
class Submission:
    """The answer to an upload: ``replayed`` when the server returned the job an earlier request with
    the same ``Idempotency-Key`` created."""

    job_id: str
    status: str
    location: str
    replayed: bool
    idempotency_key: str

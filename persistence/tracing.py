"""OpenTelemetry spans of a job, when the operator sets ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``): the api's intake, each check a worker ran and the job's
end, as one trace. Without either variable every hook returns at once and the OpenTelemetry SDK
and exporter are never imported (they are the optional ``[otel]`` extra; ``persistence.otel``
holds every line that touches them, imported on the first span).

The tree: the job's span (``onnx-reducer job``, from its submission to its end) is the child of
the span the submitter's ``TRACEPARENT`` names (the job's ``traceparent`` label, which
``onnx-reducer submit`` sends from a CI run); ``onnx-reducer intake`` and every ``onnx-reducer
check`` are children of the job's span. Its trace and span ids derive from the job's id, so the
api and any worker name the same parent without asking each other; without a ``TRACEPARENT`` the
job's trace id derives from its id too.

A span recorded inside a transaction is sent once that transaction commits (a transaction rolled
back and retried sends it once, from its last try)."""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from persistence.models import Job, JobLabel

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
TRACEPARENT_LABEL = "traceparent"
# W3C Trace Context: version 00 is exactly these four fields; a receiver parses a later version
# (any but ff) by its first four, and what follows them, if anything, starts with "-".
_TRACEPARENT = re.compile(r"(?:00|(?!00|ff)([0-9a-f]{2}))-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_LATER_VERSION_TAIL = re.compile(r"-.*")
_PENDING = "tracing.pending"  # Session.info: spans waiting for the transaction's commit

Attribute = str | int | float | bool


@dataclass(frozen=True)
class JobTrace:
    """Where a job's spans go: its trace, its own span's id, the span it hangs under (the
    ``TRACEPARENT`` it was submitted with; ``None``: the job's span is the trace's root)."""

    trace_id: int
    job_span_id: int
    parent_span_id: int | None
    sampled: bool = True


@dataclass(frozen=True)
class SpanRecord:
    name: str
    trace: JobTrace
    start_ns: int
    end_ns: int
    attributes: dict[str, Attribute] = field(default_factory=dict)
    error: str | None = None
    is_job_span: bool = False  # the job's own span (its id is ``trace.job_span_id``)


class Exporter(Protocol):
    def send(self, span: SpanRecord) -> None: ...


def enabled() -> bool:
    """Spans are sent: an OTLP endpoint is set and the SDK is not switched off."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(os.environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def _id_from(job_id: str, purpose: str, bits: int) -> int:
    digest = hashlib.sha256(f"{purpose}:{job_id}".encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big") or 1  # an id of zeros is invalid


def job_trace(job_id: str, traceparent: str | None) -> JobTrace:
    """The job's trace: under ``traceparent`` when it is a valid W3C ``traceparent``."""
    match = _parse_traceparent((traceparent or "").strip().lower())
    span_id = _id_from(job_id, "span", 64)
    if match is None or not int(match[2], 16) or not int(match[3], 16):
        return JobTrace(_id_from(job_id, "trace", 128), span_id, None)
    return JobTrace(int(match[2], 16), span_id, int(match[3], 16), bool(int(match[4], 16) & 1))


def _parse_traceparent(traceparent: str) -> re.Match[str] | None:
    """The four fields of a W3C ``traceparent``: version 00 exactly; a later version by its
    first four fields, whatever it adds after a ``-`` (groups: later version, trace id, parent
    span id, flags)."""
    match = _TRACEPARENT.match(traceparent)
    if match is None:
        return None
    tail = traceparent[match.end() :]
    if not tail or (match[1] is not None and _LATER_VERSION_TAIL.fullmatch(tail)):
        return match
    return None


def _exporter() -> Exporter:
    module = importlib.import_module("persistence.otel")  # the SDK only now: never without an endpoint
    exporter: Exporter = module.exporter()
    return exporter


def send(span: SpanRecord) -> None:
    if enabled():
        _exporter().send(span)


def _seconds_ns(moment: datetime | None) -> int:
    return int(moment.timestamp() * 1e9) if moment is not None else time.time_ns()


def _traceparent(db: Session, job_id: str) -> str | None:
    value: str | None = db.scalar(
        select(JobLabel.value).where(JobLabel.job_id == job_id, JobLabel.key == TRACEPARENT_LABEL)
    )
    return value


def _send_pending(db: Session) -> None:
    for span in db.info.pop(_PENDING, []):
        send(span)


def _drop_pending(db: Session) -> None:
    db.info.pop(_PENDING, None)


def _after_commit(db: Session, span: SpanRecord) -> None:
    if _PENDING not in db.info and not event.contains(db, "after_commit", _send_pending):
        event.listen(db, "after_commit", _send_pending)
        event.listen(db, "after_rollback", _drop_pending)
    db.info.setdefault(_PENDING, []).append(span)


# -- the hooks ---------------------------------------------------------------------------------


def intake(job_id: str, traceparent: str | None, started_ns: int, attributes: dict[str, Attribute]) -> None:
    """The api stored a new job (its upload read, inspected and committed since ``started_ns``)."""
    if enabled():
        trace = job_trace(job_id, traceparent)
        send(SpanRecord("onnx-reducer intake", trace, started_ns, time.time_ns(), {"job.id": job_id, **attributes}))


def check(db: Session, job: Job, number: int, phase: str, verdict: str, duration_s: float, **more: Attribute) -> None:
    """A check's verdict recorded for ``job`` (the span ends now and lasted ``duration_s``)."""
    if not enabled():
        return
    end = time.time_ns()
    attributes: dict[str, Attribute] = {
        "job.id": job.id,
        "check.number": number,
        "check.phase": phase,
        "check.verdict": verdict,
        **more,
    }
    trace = job_trace(job.id, _traceparent(db, job.id))
    error = f"the check ended {verdict}" if verdict in ("crash", "infra-error", "timeout") else None
    _after_commit(db, SpanRecord("onnx-reducer check", trace, end - int(duration_s * 1e9), end, attributes, error))


def job_end(db: Session, job: Job) -> None:
    """``job`` ended (its terminal event recorded): its span, from its submission to now."""
    if not enabled():
        return
    attributes: dict[str, Attribute] = {
        "job.id": job.id,
        "job.status": str(job.status),
        "job.mode": job.mode,
        "job.check_kind": job.check_kind,
        "job.checks_run": job.checks_run,
    }
    if job.nodes_before is not None:
        attributes["job.nodes_before"] = job.nodes_before
    if job.nodes_after is not None:
        attributes["job.nodes_after"] = job.nodes_after
    if job.error_code:
        attributes["job.error_code"] = job.error_code
    error = f"{job.error_code}: {job.error_message or ''}".strip() if job.status == "failed" else None
    trace = job_trace(job.id, _traceparent(db, job.id))
    start, end = _seconds_ns(job.created_at), _seconds_ns(job.finished_at)
    _after_commit(db, SpanRecord("onnx-reducer job", trace, start, end, attributes, error, is_job_span=True))

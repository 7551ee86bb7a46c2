"""A job's events, typed: one ``EventKind`` a kind, one ``TypedDict`` a payload, one way in
(``record_event``). The SSE stream and the job's page read the rows as they are stored, so a
payload's keys are the stream's contract: a payload that is not its kind's shape (a key missing,
a key unknown, a value of another type) is refused when it is recorded, never sent.

No ``from __future__ import annotations`` here: the TypedDicts' ``NotRequired`` keys are read at
run time (``__required_keys__``), which string annotations would hide on Python 3.11."""

import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict, Union, overload

from sqlalchemy.orm import Session

from persistence.enums import EventKind, JobStatus
from persistence.models import Job
from persistence.repositories.events import EventRepository
from persistence.webhooks import queue_deliveries

__all__ = [
    "PAYLOADS",
    "AnswerPayload",
    "CheckStartedPayload",
    "EndKind",
    "EventKind",
    "EventPayloadError",
    "FinishingPayload",
    "IterationPayload",
    "JobEndPayload",
    "QueuedPayload",
    "StartedPayload",
    "VerdictNeededPayload",
    "end_kind",
    "record_event",
    "validate_payload",
]


class QueuedPayload(TypedDict):
    """The job waits for a worker: new (``nodes_before`` known from the upload's inspection) or
    queued again by ``POST /v1/jobs/{id}/retry`` (``retry``)."""

    status: JobStatus
    nodes_before: NotRequired[int | None]
    retry: NotRequired[bool]


class StartedPayload(TypedDict):
    """A worker started (or resumed, ``attempt`` > 1) the job; an interactive job starts at intake."""

    nodes_before: int | None
    status: NotRequired[JobStatus]
    attempt: NotRequired[int]
    resumed: NotRequired[bool]


class FinishingPayload(TypedDict):
    """The search is done (``jobflow.ending.plan_end``): the job is ``finishing`` while a worker
    stores and verifies its answer (its finish unit); the end event follows."""

    status: JobStatus
    best_size: int | None
    checks_run: int


class CheckStartedPayload(TypedDict):
    """A worker took one of the job's checks (the iteration event with ``started_as`` ends it)."""

    iteration: int
    phase: str
    nodes: int
    worker: str
    started_at: str


class IterationPayload(TypedDict):
    """A verdict recorded (``jobflow.recording``): a check's, or an answer from a cache (``cached``)."""

    number: int
    phase: str
    nodes: int
    verdict: str
    reproduces: bool
    duration_s: float
    best_size: int
    fingerprint: str
    started_as: NotRequired[int]  # the number the check ran as (shown while it ran)
    worker: NotRequired[str]  # the worker whose check gave the verdict ("" for a person's answer)
    cached: NotRequired[str]  # "job" or "farm": answered from that cache, no check ran
    late: NotRequired[bool]  # landed after the job's end was planned: recorded, not the answer


class VerdictNeededPayload(TypedDict):
    """An interactive job asks a person about ``iteration``'s model (downloadable at ``artifact``)."""

    iteration: int
    phase: str
    nodes: int
    artifact: str


class AnswerPayload(TypedDict, total=False):
    """What a success adds to its end event: the answer, in words."""

    min_bad_nodes: list[str]  # the min-bad model's node labels (the first 50)
    localization: dict[str, Any]
    verified: dict[str, Any]  # a reduce job's answer checked once more as stored
    suspect: dict[str, Any] | None
    task: str  # "precision" for a precision job, with the two below
    keep_fp32: list[str]
    fp32_tensors: list[str]
    bundle_checks: int  # the checks the bug-report bundle's self-check ran (not in checks_run)
    bundle_refused: str  # why the job keeps no bug-report bundle (its self-check did not reproduce)
    releases: dict[str, Any]  # a bisect-releases job's answer (reducer_core.release_bisect.ReleaseAnswer)
    passes: dict[str, Any]  # a bisect-passes job's answer (reducer_core.pass_bisect.PassAnswer)


class JobEndPayload(AnswerPayload):
    """The job ended (``job.succeeded``, ``job.failed``, ``job.cancelled``); a success adds its answer."""

    status: JobStatus
    nodes_before: int | None
    nodes_after: int | None
    checks_run: int
    error_code: str | None
    error_message: str | None


EndKind = Literal[EventKind.SUCCEEDED, EventKind.FAILED, EventKind.CANCELLED]

PAYLOADS: dict[EventKind, type[Mapping[str, Any]]] = {
    EventKind.QUEUED: QueuedPayload,
    EventKind.STARTED: StartedPayload,
    EventKind.FINISHING: FinishingPayload,
    EventKind.CHECK_STARTED: CheckStartedPayload,
    EventKind.ITERATION: IterationPayload,
    EventKind.VERDICT_NEEDED: VerdictNeededPayload,
    EventKind.SUCCEEDED: JobEndPayload,
    EventKind.FAILED: JobEndPayload,
    EventKind.CANCELLED: JobEndPayload,
}


class EventPayloadError(ValueError):
    """A payload that is not its kind's shape: a bug in the code that records it."""


def end_kind(status: JobStatus) -> EndKind:
    """The event that ends a job with ``status`` (a terminal status)."""
    if status is JobStatus.SUCCEEDED:
        return EventKind.SUCCEEDED
    return EventKind.CANCELLED if status is JobStatus.CANCELLED else EventKind.FAILED


@overload
def record_event(db: Session, job: Job | str, kind: Literal[EventKind.QUEUED], payload: QueuedPayload) -> int: ...
@overload
def record_event(db: Session, job: Job | str, kind: Literal[EventKind.STARTED], payload: StartedPayload) -> int: ...
@overload
def record_event(db: Session, job: Job | str, kind: Literal[EventKind.FINISHING], payload: FinishingPayload) -> int: ...
@overload
def record_event(
    db: Session, job: Job | str, kind: Literal[EventKind.CHECK_STARTED], payload: CheckStartedPayload
) -> int: ...
@overload
def record_event(db: Session, job: Job | str, kind: Literal[EventKind.ITERATION], payload: IterationPayload) -> int: ...
@overload
def record_event(
    db: Session, job: Job | str, kind: Literal[EventKind.VERDICT_NEEDED], payload: VerdictNeededPayload
) -> int: ...
@overload
def record_event(db: Session, job: Job | str, kind: EndKind, payload: JobEndPayload) -> int: ...
def record_event(db: Session, job: Job | str, kind: EventKind, payload: Mapping[str, Any]) -> int:
    """Store the job's next event (its sequence number taken under the job's row lock) after
    checking ``payload`` against ``kind``'s type; returns the sequence number to announce. Given
    the job's row (``Job``), the caller holds its lock in this transaction
    (``JobRepository.lock_running``): the number is taken from the row in memory, written with the
    row's other changes, with no statement of its own. An end or a question (``verdict.needed``)
    also queues its webhook deliveries (``persistence.webhooks``)."""
    validate_payload(kind, payload)
    events = EventRepository(db)
    seq = (events.append_locked(job, kind, payload) if isinstance(job, Job) else events.append(job, kind, payload)).seq
    queue_deliveries(db, job, kind, payload)  # the webhooks' outbox, in this transaction
    return seq


def validate_payload(kind: EventKind, payload: Mapping[str, Any]) -> None:
    """Raise ``EventPayloadError`` unless ``payload`` has exactly ``kind``'s keys (its optional
    ones aside) with values of their declared types."""
    shape = PAYLOADS.get(kind)
    if shape is None:
        raise EventPayloadError(f"unknown event kind {kind!r}: add it to EventKind and PAYLOADS")
    hints = _hints(shape)
    required: frozenset[str] = getattr(shape, "__required_keys__", frozenset())
    missing = sorted(required - payload.keys())
    unknown = sorted(payload.keys() - hints.keys())
    if missing or unknown:
        raise EventPayloadError(f"{kind} payload: missing {missing}, unknown {unknown} (see {shape.__name__})")
    for key, value in payload.items():
        if not _fits(value, hints[key]):
            raise EventPayloadError(f"{kind} payload: {key}={value!r} is not {hints[key]} (see {shape.__name__})")


@functools.cache
def _hints(shape: type) -> dict[str, Any]:
    """A payload type's keys and their types (evaluated once: two events a verdict ask)."""
    return typing.get_type_hints(shape)


def _fits(value: object, hint: Any) -> bool:
    """Whether ``value`` is of type ``hint`` (unions, containers by their outer type, ``Any``)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin is NotRequired:
        return _fits(value, typing.get_args(hint)[0])
    if origin in (Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if hint is None or hint is type(None):
        return value is None
    if origin is not None:
        return isinstance(value, origin)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type) and issubclass(hint, JobStatus):
        return value in set(JobStatus)
    return isinstance(value, hint)

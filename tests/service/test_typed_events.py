"""Every event kind has a payload type, and ``record_event`` refuses a payload that is not its
kind's shape (a missing key, an unknown key, a value of another type) before anything is stored;
a job's status is read back from PostgreSQL as ``JobStatus``."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from persistence.db import Database
from persistence.enums import EventKind, JobStatus
from persistence.events import PAYLOADS, EventPayloadError, record_event, validate_payload
from persistence.models import Event
from persistence.repositories import JobRepository, TeamRepository
from tests.service.helpers import stored_job

_END = {
    "status": JobStatus.FAILED,
    "nodes_before": 12,
    "nodes_after": None,
    "checks_run": 3,
    "error_code": "internal-error",
    "error_message": "boom",
}
# a valid payload of each kind, with its required keys only
SAMPLES: dict[EventKind, dict[str, Any]] = {
    EventKind.QUEUED: {"status": JobStatus.QUEUED},
    EventKind.STARTED: {"nodes_before": 12},
    EventKind.FINISHING: {"status": JobStatus.FINISHING, "best_size": 4, "checks_run": 9},
    EventKind.CHECK_STARTED: {
        "iteration": 4,
        "phase": "bisect",
        "nodes": 6,
        "worker": "w1",
        "started_at": "2026-01-01T00:00:00+00:00",
    },
    EventKind.ITERATION: {
        "number": 4,
        "phase": "bisect",
        "nodes": 6,
        "verdict": "fail",
        "reproduces": True,
        "duration_s": 0.25,
        "best_size": 6,
        "fingerprint": "ab" * 8,
    },
    EventKind.VERDICT_NEEDED: {"iteration": 2, "phase": "original", "nodes": 12, "artifact": "/v1/x"},
    EventKind.SUCCEEDED: _END | {"status": JobStatus.SUCCEEDED},
    EventKind.FAILED: _END,
    EventKind.CANCELLED: _END | {"status": JobStatus.CANCELLED},
}


def test_every_event_kind_has_a_payload_type_and_a_sample_here() -> None:
    assert set(PAYLOADS) == set(EventKind)
    assert set(SAMPLES) == set(EventKind)  # a new kind needs a sample here, so the tests below cover it


@pytest.mark.parametrize("kind", list(EventKind))
def test_a_payload_of_its_kind_passes_and_any_other_shape_fails_loudly(kind: EventKind) -> None:
    sample = SAMPLES[kind]
    validate_payload(kind, sample)
    for key in sample:
        with pytest.raises(EventPayloadError, match=f"missing \\['{key}'\\]"):
            validate_payload(kind, {k: v for k, v in sample.items() if k != key})
        with pytest.raises(EventPayloadError, match=key):
            validate_payload(kind, sample | {key: object()})
    with pytest.raises(EventPayloadError, match="unknown \\['surprise'\\]"):
        validate_payload(kind, sample | {"surprise": 1})


def test_optional_keys_are_typed_too() -> None:
    iteration = SAMPLES[EventKind.ITERATION]
    validate_payload(EventKind.ITERATION, iteration | {"cached": "farm", "started_as": 3, "worker": ""})
    with pytest.raises(EventPayloadError, match="started_as"):
        validate_payload(EventKind.ITERATION, iteration | {"started_as": "3"})
    with pytest.raises(EventPayloadError, match="nodes"):
        validate_payload(EventKind.ITERATION, iteration | {"nodes": True})  # a bool is no count
    with pytest.raises(EventPayloadError, match="status"):
        validate_payload(EventKind.FAILED, _END | {"status": "exploded"})  # not a job status
    validate_payload(EventKind.SUCCEEDED, SAMPLES[EventKind.SUCCEEDED] | {"min_bad_nodes": ["Mul_1"]})


def test_an_unknown_kind_fails_loudly() -> None:
    with pytest.raises(EventPayloadError, match="unknown event kind"):
        validate_payload("job.exploded", {})  # type: ignore[arg-type]


def test_record_event_stores_a_valid_payload_and_nothing_of_an_invalid_one(db_url: str) -> None:
    db = Database(db_url)
    try:
        with db.session() as session:
            job_id = stored_job(session, TeamRepository(session).get_or_create("team-events").id).id
        with db.session() as session, pytest.raises(EventPayloadError, match="nodes_before"):
            record_event(session, job_id, EventKind.STARTED, {"attempt": 1})  # type: ignore[typeddict-item]
        with db.session() as session:
            seq = record_event(session, job_id, EventKind.QUEUED, {"status": JobStatus.QUEUED, "nodes_before": 4})
        with db.session() as session:
            stored = session.scalars(select(Event).where(Event.job_id == job_id)).all()
            assert [(e.seq, e.kind, e.payload) for e in stored] == [
                (seq, "job.queued", {"status": "queued", "nodes_before": 4})
            ]
            read = JobRepository(session).get(job_id)
            assert read is not None
            assert read.status is JobStatus.QUEUED  # the column reads back as the enum, not a str
    finally:
        db.dispose()

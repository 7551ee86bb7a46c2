"""Recording verdicts, the one way: every verdict a job's session takes in (a worker's check, a
person's answer, an answer from the job's or the farm's cache) becomes an iteration row, the job's
counters and an ``iteration`` event here, under the job's row lock.

An iteration takes the number the session gave its record (``IterationRecord.iteration``: 1, 2,
3... in recording order, cached records included), so the numbers have no gap: a check cancelled
before its verdict (a speculative one the search no longer needs) takes none. The check unit
keeps the number it ran under (the event's ``started_as``; the in-flight number, which the page
shows while it runs). A person's answer fills the pending row its question was asked with
(numbered when asked: nothing else runs for an interactive job meanwhile)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from persistence import tracing
from persistence.enums import ArtifactKind, EventKind
from persistence.events import IterationPayload, record_event
from persistence.models import Iteration, Job
from persistence.repositories import ArtifactRepository, CachedAnswer, IterationRepository
from persistence.store import StoredBlob
from reducer_core.config import SessionConfig
from reducer_core.records import IterationRecord
from reducer_core.requests import CheckRequest
from reducer_core.verdict import Goal, Verdict, VerdictKind

OUTPUT_TAIL = 4000  # the characters of a check's output kept with its iteration


@dataclass(frozen=True)
class CheckRun:
    """Where a verdict came from: a worker's check (the model it judged, stored, its output and the
    worker), or the pending iteration a person answered (``asked``: its number)."""

    blob: StoredBlob | None = None
    locations: list[str] = field(default_factory=list)
    output: str = ""
    worker: str = ""
    asked: int | None = None


def record_iteration(db: Session, job: Job, record: IterationRecord, run: CheckRun) -> int:
    """A checked verdict (``record``, given by ``run``): its iteration row, the job's counters, an
    event; returns the event's sequence number."""
    verdict = record.verdict
    iterations = IterationRepository(db)
    asked = iterations.by_number(job.id, run.asked) if run.asked is not None else None
    row = asked or Iteration(job_id=job.id, number=record.iteration or iterations.next_number(job.id), fingerprint="")
    row.phase, row.fingerprint, row.node_count = record.phase, record.candidate.fingerprint, len(record.candidate)
    iterations.finish(row, verdict.kind.value, record.reproduces, verdict.signature, verdict.detail)
    row.duration_s, row.output_tail = verdict.duration_s, run.output[-OUTPUT_TAIL:]
    if run.blob is not None:  # a new number: its model's row is new too (inserted before the iteration's)
        meta = {"weights": run.locations, "nodes": len(record.candidate)}
        name = f"iteration-{row.number}"
        row.artifact_id = ArtifactRepository(db).add(job.id, ArtifactKind.ITERATION, name, run.blob, meta)
    if asked is None:
        db.add(row)
    _count(job, row.number, record.best_size)
    job.check_time_s += verdict.duration_s
    payload = _payload(row.number, record)
    if run.asked is None:  # a worker's check: the number it ran as and who ran it
        payload |= {"started_as": record.number, "worker": run.worker}
    tracing.check(db, job, row.number, record.phase, verdict.kind.value, verdict.duration_s, **_span_facts(row, run))
    return record_event(db, job, EventKind.ITERATION, payload)


def record_taken(db: Session, job: Job, records: list[IterationRecord], run: CheckRun) -> int:
    """Record the verdicts a session took in, in order (a checked one given by ``run``; a cached
    one says which cache answered it: ``IterationRecord.source``); returns the last event's
    sequence number (0: none)."""
    seq = 0
    for record in records:
        seq = record_cached(db, job, record) if record.cached else record_iteration(db, job, record, run)
    return seq


def record_late(
    db: Session, job: Job, request: CheckRequest, verdict: Verdict, run: CheckRun, config: SessionConfig
) -> int:
    """A speculative check's verdict that landed after the job's end was planned (``job``
    finishing, or ended already; held): an iteration row marked ``late``, for the record only,
    and its event while the job is finishing (an ended job's terminal event stays its last: no
    event, 0 returned). The session is not asked (the end is not re-planned), the model is not
    stored, the job's best is not changed. Returns the event's sequence number."""
    iterations = IterationRepository(db)
    reproduces = _late_reproduces(iterations, job.id, verdict, config)
    row = Iteration(job_id=job.id, number=iterations.next_number(job.id), late=True)
    row.phase, row.fingerprint, row.node_count = request.phase, request.candidate.fingerprint, len(request.candidate)
    iterations.finish(row, verdict.kind.value, reproduces, verdict.signature, verdict.detail)
    row.duration_s, row.output_tail = verdict.duration_s, run.output[-OUTPUT_TAIL:]
    db.add(row)
    job.check_time_s += verdict.duration_s
    job.iterations_done = max(job.iterations_done, row.number)  # the count agrees with the list
    if job.status.terminal:
        return 0
    payload: IterationPayload = {
        "number": row.number,
        "phase": request.phase,
        "nodes": len(request.candidate),
        "verdict": verdict.kind.value,
        "reproduces": reproduces,
        "duration_s": round(verdict.duration_s, 4),
        "best_size": job.best_size if job.best_size is not None else len(request.candidate),
        "fingerprint": request.candidate.fingerprint,
        "started_as": request.number,
        "worker": run.worker,
        "late": True,
    }
    return record_event(db, job, EventKind.ITERATION, payload)


def _late_reproduces(iterations: IterationRepository, job_id: str, verdict: Verdict, config: SessionConfig) -> bool:
    """Whether a late verdict is the failure the job looked for (as the session would judge it)."""
    if config.goal is Goal.PASS:
        return verdict.kind is VerdictKind.PASS
    original = iterations.original(job_id)
    if original is None or original.verdict is None:
        return verdict.is_failure
    first = Verdict(VerdictKind(original.verdict), original.signature or "", original.detail or "")
    return verdict.reproduces(first, config.pin_signature)


def _span_facts(row: Iteration, run: CheckRun) -> dict[str, str | int | bool]:
    facts: dict[str, str | int | bool] = {"check.nodes": row.node_count, "check.reproduces": bool(row.reproduces)}
    return facts | ({"check.worker": run.worker} if run.worker else {})


def record_cached(db: Session, job: Job, record: IterationRecord) -> int:
    """A verdict the session answered from its cache (``record.source``: the job's own or the
    farm's): an iteration row marked cached (no check, no model, no time), the job's counters, an
    event."""
    verdict = record.verdict
    source = FROM_FARM if record.source == FROM_FARM else FROM_JOB
    answer = CachedAnswer(
        phase=record.phase,
        fingerprint=record.candidate.fingerprint,
        node_count=len(record.candidate),
        verdict=verdict.kind.value,
        reproduces=record.reproduces,
        signature=verdict.signature,
        detail=verdict.detail,
        source=source,
    )
    row = IterationRepository(db).add_cached(job.id, answer, record.iteration or None)
    _count(job, row.number, record.best_size)
    job.cache_hits += 1
    job.farm_hits += 1 if source == FROM_FARM else 0
    payload = _payload(row.number, record) | {"duration_s": 0.0, "cached": source}
    return record_event(db, job, EventKind.ITERATION, payload)


FROM_JOB, FROM_FARM = "job", "farm"  # where a cached answer came from


def _count(job: Job, number: int, best_size: int) -> None:
    job.iterations_done = max(job.iterations_done, number)
    job.best_size = best_size


def _payload(number: int, record: IterationRecord) -> IterationPayload:
    return {
        "number": number,
        "phase": record.phase,
        "nodes": len(record.candidate),
        "verdict": record.verdict.kind.value,
        "reproduces": record.reproduces,
        "duration_s": round(record.verdict.duration_s, 4),
        "best_size": record.best_size,
        "fingerprint": record.candidate.fingerprint,
    }

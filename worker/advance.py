"""Advancing a job's session, by whichever worker has something to give it: the worker that
starts the job (nothing to deliver) and every worker that finished one of its checks (the verdict).
Always under the job's row lock (``JobRepository.lock_running``), in one transaction:

1. take the session: the one this process kept live when the row's ``state_version`` is the one
   it wrote last, else rebuilt from ``jobs.session_state`` (``worker.live_session``; the prepared
   model is this process's own, kept by ``worker.prepared``; a rebuild replays the flow against the
   verdict cache, no check runs); a job's start seeds it with the farm's verdicts (once);
2. deliver the verdict (**verdict recorded**: its iteration row, model, event; the unit is done, so
   a second delivery of the same unit is ignored);
3. save the state (once, its version bumped); if the session is done, store min-bad/min-good and
   end the job (a reduce job's answer verified first: ``worker.final_checks``, whose checks the
   caller runs after the commit when the stored models are not the very ones a check judged);
   otherwise ask
   the session for up to (free slots) requests not in flight and queue one check unit each
   (**checks queued**: the caller sends one message each after the commit).

No worker waits for another's result: the next checks are queued the moment a verdict lands."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from engine.session import ReductionSession
from engine.workspace import Workspace
from persistence.enums import ArtifactKind, EventKind, JobStatus, JobTask
from persistence.models import CheckUnit, Iteration, Job, utcnow
from persistence.reduction import store_results
from persistence.report_bundle import store_bundle
from persistence.repositories import ArtifactRepository, EventRepository, JobRepository
from persistence.repositories.units import NewUnit, UnitRepository
from persistence.store import StoredBlob
from reducer_core.candidate import Candidate
from reducer_core.errors import CheckInfraError, OriginalDidNotFailError
from reducer_core.localization import LayerwiseResult
from reducer_core.records import IterationRecord, Localization
from reducer_core.session import Answer, CheckRequest, LayerwiseRequest, Request, SilentListener, repeat_of
from worker.context import RunnerContext
from worker.endings import end_payload, ending_of, finish_locked
from worker.farm_cache import FarmLink
from worker.final_checks import Finals, plan_finals, succeed
from worker.live_session import LIVE, number_from_rows, save_state
from worker.precision_job import precision_payload, store_precision_results
from worker.prepared import PreparedJob

log = logging.getLogger("onnx_reducer.worker")


@dataclass(frozen=True)
class Delivery:
    """A finished check: its request, answer, the model it checked (stored) and its output."""

    request: Request
    answer: Answer
    blob: StoredBlob | None = None
    locations: list[str] = field(default_factory=list)
    output: str = ""
    worker: str = ""


@dataclass
class Advanced:
    """What the caller does after the commit: notify up to ``seq``, announce ``queued`` units."""

    seq: int = 0
    queued: int = 0
    ended: bool = False
    finals: Finals | None = None  # final checks to run after the commit (worker.final_checks.run_finals)


class _Collector(SilentListener):
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.records: list[IterationRecord] = []  # checked and cached alike, in order

    def on_record(self, record: IterationRecord) -> None:
        self.records.append(record)

    def on_localization(self, localization: Localization) -> None:
        log.info("job %s: localisation path=%s: %s", self.job_id, localization.path, localization.reason)


def request_of(unit: CheckUnit) -> Request:
    """The session's request a check unit stands for (its repeat index, for a flaky check's
    re-check, is part of the request id)."""
    if unit.kind == LayerwiseRequest.kind:
        return LayerwiseRequest()
    candidate = Candidate.from_json(unit.candidate)
    repeat = repeat_of(unit.request_id)
    return CheckRequest(candidate, unit.phase, unit.attempt, unit.number, repeat, speculative=unit.speculative)


def new_unit(request: Request) -> NewUnit:
    if isinstance(request, LayerwiseRequest):
        return NewUnit(request.id, request.kind, 0, "layerwise", 0, False, {}, 0)
    return NewUnit(
        request.id,
        request.kind,
        request.number,
        request.phase,
        request.attempt,
        request.speculative,
        request.candidate.to_json(),
        len(request.candidate),
    )


def advance(
    ctx: RunnerContext, session: Any, job: Job, prepared: PreparedJob, delivery: Delivery | None = None
) -> Advanced:
    """One step of the job's session (``job`` row-locked by the caller's transaction)."""
    collector = _Collector(job.id)
    reduction = LIVE.take(prepared, job, collector)
    number_from_rows(session, job, reduction)
    farm = FarmLink.open(ctx, session, job, reduction)
    failure: Exception | None = None
    try:
        if delivery is not None:
            reduction.deliver(delivery.request, delivery.answer)
            _share(farm, delivery)
        else:
            farm.seed(ctx, reduction)  # the farm's verdicts, once at the start: cached answers, no check
            reduction.next_requests(0)  # starts the flow: what the cache answers is recorded now
    except (OriginalDidNotFailError, CheckInfraError) as exc:
        failure = exc
    seq = _record(session, job, reduction, collector.records, delivery, farm)
    if not reduction.done and failure is None:
        queued = _queue_next(ctx, session, job, reduction)
        save_state(job, reduction)
        LIVE.keep_after_commit(session, prepared, job, reduction)
        return Advanced(seq, queued)
    save_state(job, reduction)
    if failure is not None:
        status, code, message = ending_of(failure, ctx, job.id)
        return Advanced(finish_locked(session, job, status, code, message), ended=True)
    if reduction.done and prepared.task is JobTask.PRECISION:
        return Advanced(_succeed(ctx, session, job, reduction, prepared.workspace, prepared), ended=True)
    finals = plan_finals(ctx, session, job, reduction, prepared)
    if finals.complete:
        return Advanced(succeed(session, job, finals), ended=True)
    return Advanced(seq, finals=finals)


def _share(farm: FarmLink, delivery: Delivery) -> None:
    """The verdict this worker's check gave, kept for later jobs of the farm."""
    if isinstance(delivery.answer, LayerwiseResult):
        farm.share_layerwise(delivery.answer)
    elif isinstance(delivery.request, CheckRequest):
        farm.share(delivery.request.candidate, delivery.answer)


def _queue_next(ctx: RunnerContext, session: Any, job: Job, reduction: ReductionSession) -> int:
    units = UnitRepository(session)
    active = units.active_request_ids(job.id)
    slots = min(ctx.max_workers_per_job, max(1, units.live_workers(job.queue, ctx.worker_seen_s)))
    wanted = slots - len(active)
    if wanted < 1:
        return 0
    requests = reduction.next_requests(wanted, active)  # numbered by the session (in flight: the same number)
    units.add(job.id, [new_unit(r) for r in requests])
    return len(requests)


def _record(
    session: Any,
    job: Job,
    reduction: ReductionSession,
    records: list[IterationRecord],
    delivery: Delivery | None,
    farm: FarmLink,
) -> int:
    """The iteration rows and events of the verdicts just taken in (one per delivered check, one
    per answer from the job's or the farm's cache).

    The session numbers its records as it records them (``record.iteration``: no gap, a check
    cancelled before its verdict, a speculative one the search no longer needs, takes none). The
    number its unit was queued with (``record.number``, shown while it runs) is kept in the event
    as ``started_as``, and the unit takes the iteration's number."""
    seq = 0
    for record in records:
        number = record.iteration
        if record.cached:
            seq = farm.record_hit(record, number)
            continue
        verdict = record.verdict
        row = Iteration(
            job_id=job.id,
            number=number,
            phase=record.phase,
            fingerprint=record.candidate.fingerprint,
            node_count=len(record.candidate),
            pending=False,
            verdict=verdict.kind.value,
            reproduces=record.reproduces,
            signature=verdict.signature,
            detail=verdict.detail,
            duration_s=verdict.duration_s,
            output_tail=delivery.output[-4000:] if delivery else None,
            finished_at=utcnow(),
        )
        session.add(row)
        session.flush()
        if delivery is not None and delivery.blob is not None:
            meta = {"weights": delivery.locations, "nodes": len(record.candidate)}
            name = f"iteration-{number}"
            row.artifact_id = (
                ArtifactRepository(session).put(job.id, ArtifactKind.ITERATION, name, delivery.blob, meta).id
            )
        JobRepository.progress(
            job,
            iterations_done=max(job.iterations_done, number),
            best_size=record.best_size,
            check_time_s=job.check_time_s + verdict.duration_s,
        )
        if delivery is not None:
            UnitRepository(session).renumber(job.id, delivery.request.id, number)
        payload = {
            "number": number,
            "started_as": record.number,
            "phase": record.phase,
            "nodes": len(record.candidate),
            "verdict": verdict.kind.value,
            "reproduces": record.reproduces,
            "duration_s": round(verdict.duration_s, 4),
            "best_size": record.best_size,
            "fingerprint": record.candidate.fingerprint,
            "worker": delivery.worker if delivery else "",
        }
        seq = EventRepository(session).append(job.id, EventKind.ITERATION, payload).seq
    return seq


def _succeed(
    ctx: RunnerContext, session: Any, job: Job, reduction: ReductionSession, workspace: Workspace, prepared: PreparedJob
) -> int:
    result = reduction.result
    precision = prepared.task is JobTask.PRECISION
    if precision:
        stored = store_precision_results(ctx.layout.store, reduction, result, prepared.work_dir)
    else:
        stored = store_results(ctx.layout.store, workspace, result, prepared.work_dir)
        golden = prepared.session_check.golden
        bundle = store_bundle(
            ctx.layout.store,
            workspace,
            result,
            prepared.spec,
            golden,
            prepared.work_dir,
            job.model_filename,
            ctx.worker,
        )
        stored |= {ArtifactKind.BUNDLE: bundle} if bundle is not None else {}
    for kind, (blob, meta) in stored.items():
        ArtifactRepository(session).put(job.id, kind, kind.value, blob, meta)
    job.nodes_after = len(result.min_bad)
    job.best_size = len(result.min_bad)
    UnitRepository(session).cancel_active(job.id)
    JobRepository(session).finish(job, JobStatus.SUCCEEDED)
    labels = [workspace.index.label(n) for n in sorted(result.min_bad.nodes)][:50]
    payload = end_payload(job) | {"min_bad_nodes": labels}
    if precision:
        payload |= precision_payload(reduction, result)
    if result.localization is not None:
        payload["localization"] = result.localization.to_json()
    return EventRepository(session).append(job.id, EventKind.SUCCEEDED, payload).seq

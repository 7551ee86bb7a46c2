"""Advancing a job's session, by whichever worker has something to give it: the worker that
starts the job (nothing to deliver) and every worker that finished one of its checks (the verdict).
Always under the job's row lock (``JobRepository.lock_running``), in one transaction:

1. take the session: the one this process kept live when the row's ``state_version`` is the one
   it wrote last, else rebuilt from ``jobs.session_state`` (``worker.live_session``; the prepared
   model is this process's own, kept by ``worker.prepared``; a rebuild replays the flow against the
   verdict cache, no check runs); a job's start seeds it with the farm's verdicts (once);
2. deliver the verdict through ``jobflow.advance`` (**verdict recorded** by ``jobflow.recording``:
   its iteration row, model, event; the unit is done, so a second delivery of the same unit is
   ignored);
3. ask for the next checks, save the state (once, its version bumped); if the session is done,
   plan the job's end (``jobflow.ending.plan_end``: the job is ``finishing``, its checks in flight
   cancelled, a finish unit queued that any worker runs outside the lock: ``worker.finishing``);
   otherwise ask the session for up to (free slots) requests not in flight and queue one check
   unit each (**checks queued**: the caller sends one message each after the commit).

No worker waits for another's result: the next checks are queued the moment a verdict lands."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from engine.session import ReductionSession
from jobflow import advance as flow
from jobflow.ending import end, plan_end
from jobflow.recording import CheckRun
from jobflow.units import new_unit
from persistence.enums import ArtifactKind
from persistence.models import Job
from persistence.repositories import ArtifactRepository, JobRepository
from persistence.repositories.units import UnitRepository
from persistence.store import StoredBlob
from reducer_core.localization import LayerwiseResult
from reducer_core.requests import Answer, CheckRequest, Request
from worker.claims import may_follow_up
from worker.context import RunnerContext
from worker.endings import ending_of
from worker.farm_cache import FarmLink
from worker.live_session import LIVE
from worker.prepared import PREPARED, PreparedJob

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
    finishing: bool = False  # its end is planned: a finish unit queued (``jobflow.ending.plan_end``)
    others_waiting: bool | None = None  # other work for this worker's queues (asked with ``follow``)

    @property
    def goes_on(self) -> bool:
        """The job still runs its checks: neither ended nor finishing."""
        return not self.ended and not self.finishing


def advance(
    ctx: RunnerContext,
    session: Session,
    job: Job,
    prepared: PreparedJob,
    delivery: Delivery | None = None,
    follow: bool = False,
) -> Advanced:
    """One step of the job's session (``job`` row-locked by the caller's transaction); with
    ``follow``, it also reads whether other work waits (``Advanced.others_waiting``: the caller
    may claim the job's next check, ``worker.claims.claim_follow_up``)."""
    collector = flow.Collector(job.id)
    reduction = LIVE.take(session, prepared, job, collector)
    farm = FarmLink.open(ctx, session, job, reduction)
    seed = None if delivery is not None else (lambda live: farm.seed(ctx, live))  # once, at the start
    step = flow.take_in(session, job, reduction, collector, _delivered(delivery), seed)
    if delivery is not None and step.failure is None:
        _share(farm, delivery)
        if isinstance(delivery.answer, LayerwiseResult):
            keep_node_errors(ctx, session, job, delivery.answer)
    if farm.layerwise is not None:
        keep_node_errors(ctx, session, job, farm.layerwise)  # seeded from the farm: no run of its own
    seq = step.seq
    if step.failure is None and not reduction.done:
        queued, others_waiting = _queue_next(ctx, session, job, reduction, follow and may_follow_up(ctx, job))
        flow.save(session, job, reduction)
        LIVE.keep_after_commit(session, prepared, job, reduction)
        return Advanced(seq, queued, others_waiting=others_waiting)
    flow.save(session, job, reduction)
    if step.failure is not None:
        status, code, message = ending_of(step.failure, ctx, job.id)
        return Advanced(end(session, job, status, code, message), ended=True)
    seq = plan_end(session, job)  # the finish unit stores and verifies the answer, outside the lock
    LIVE.keep_after_commit(session, prepared, job, reduction)  # for this worker's finish, if it takes it
    return Advanced(seq, queued=1, finishing=True)


def _delivered(delivery: Delivery | None) -> flow.Delivery | None:
    """The worker's finished check as ``jobflow`` records it."""
    if delivery is None:
        return None
    run = CheckRun(delivery.blob, delivery.locations, delivery.output, delivery.worker)
    return flow.Delivery(delivery.request, delivery.answer, run)


def _share(farm: FarmLink, delivery: Delivery) -> None:
    """The verdict this worker's check gave, kept for later jobs of the farm."""
    if isinstance(delivery.answer, LayerwiseResult):
        farm.share_layerwise(delivery.answer)
    elif isinstance(delivery.request, CheckRequest):
        farm.share(delivery.request.candidate, delivery.answer)


def keep_node_errors(ctx: RunnerContext, session: Session, job: Job, result: LayerwiseResult) -> None:
    """The layerwise run's per-tensor errors, stored as the job's ``node-errors`` artifact (JSON)
    for ``GET /v1/jobs/{id}/node-errors`` and the page's error overlay."""
    if result.errors is None:
        return
    data = json.dumps(result.errors.to_json(), allow_nan=False, separators=(",", ":")).encode()
    blob = ctx.layout.store.put_stream([data])
    meta = {"tensors": len(result.errors.tensors), "total": result.errors.total}
    ArtifactRepository(session).put(job.id, ArtifactKind.NODE_ERRORS, ArtifactKind.NODE_ERRORS.value, blob, meta)


def _queue_next(
    ctx: RunnerContext, session: Session, job: Job, reduction: ReductionSession, ask_others: bool
) -> tuple[int, bool | None]:
    """Queue the session's next requests, one unit each, up to the job's free slots (its farm's
    live workers, at most ``max_workers_per_job``, less its units in flight); how many, and with
    ``ask_others`` whether other work waits for this worker's queues."""
    units = UnitRepository(session)
    with session.no_autoflush:  # the units' rows are current (each change a statement); the job's wait for the commit
        survey = units.survey(job.id, ctx.queues if ask_others else None, ctx.max_attempts)
        live = ctx.farm_size.workers(job.queue, lambda: units.live_workers(job.queue, ctx.worker_seen_s))
    wanted = min(ctx.max_workers_per_job, max(1, live)) - len(survey.in_flight)
    if wanted < 1:
        return 0, survey.others_waiting
    requests = reduction.next_requests(wanted, survey.in_flight)  # numbered by the session (in flight: the same number)
    units.add(job.id, [new_unit(r) for r in requests])
    return len(requests), survey.others_waiting


def announce(ctx: RunnerContext, job_id: str, queue: str, outcome: Advanced) -> None:
    """After the commit: wake the SSE followers, and send one message per queued check but one:
    this worker goes on to take the next piece of work itself (a message only says "there is
    work", so the count is what matters, whichever work each worker then takes)."""
    if outcome.seq:
        ctx.notify(job_id, outcome.seq)
    for _ in range(outcome.queued - 1):
        ctx.wake(job_id, queue)
    if outcome.ended:
        cleanup_if_ended(ctx, job_id)


def cleanup_if_ended(ctx: RunnerContext, job_id: str) -> None:
    """An ended job's prepared model and scratch go (its stored artifacts stay)."""
    with ctx.db.session() as session:
        job = JobRepository(session).get(job_id)
        ended = job is None or job.status.terminal
    if ended:
        PREPARED.drop(job_id)
        shutil.rmtree(ctx.layout.work_dir(job_id), ignore_errors=True)

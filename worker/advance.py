"""The worker's side of a step of a job's session (``WorkerSite``, lent to ``jobflow.advance``),
by whichever worker has something to give it: the worker that starts the job (nothing to
deliver) and every worker that finished one of its checks (the verdict). Always under the job's
row lock (``JobRepository.lock_running``), in one transaction, which ``jobflow.advance`` runs:

1. the session: the one this process kept live when the row's ``state_version`` is the one it
   wrote last, else rebuilt from ``jobs.session_state`` (``worker.live_session``; the prepared
   model is this process's own, kept by ``worker.prepared``; a rebuild replays the flow against the
   verdict cache, no check runs); a job's start seeds it with the farm's verdicts (once);
2. the verdict is delivered and recorded by ``jobflow`` (its iteration row, model, event; the
   unit is done, so a second delivery of the same unit is ignored); this worker shares it with
   the farm and keeps a layerwise run's node errors;
3. the next checks: up to (free slots) requests not in flight, one check unit each (**checks
   queued**: the caller sends one message each after the commit); or, when the session is done,
   the job's end planned (``jobflow.ending.plan_end``: a finish unit that any worker runs outside
   the lock, ``worker.finishing``), the session kept live for it.

No worker waits for another's result: the next checks are queued the moment a verdict lands."""

from __future__ import annotations

import json
import logging
import shutil
from datetime import datetime

from sqlalchemy.orm import Session

from engine.session import ReductionSession
from jobflow.advance import Advanced, Collector, Delivery
from jobflow.ending import JobTimedOutError
from jobflow.units import new_unit
from persistence.enums import ArtifactKind
from persistence.models import CheckUnit, Job, utcnow
from persistence.repositories import ArtifactRepository, JobRepository
from persistence.repositories.units import UnitRepository
from reducer_core.localization import LayerwiseResult
from reducer_core.requests import CheckRequest
from worker.claims import claim_follow_up, may_follow_up
from worker.context import RunnerContext
from worker.farm_cache import FarmLink
from worker.prepared import PreparedJob

log = logging.getLogger("onnx_reducer.worker")

__all__ = ["Advanced", "WorkerSite", "announce", "cleanup_if_ended", "keep_node_errors"]


class WorkerSite:
    """This worker's side of one step of ``prepared``'s job (``jobflow.advance.Site``): its live
    session, the farm's verdicts, the checks it queues; ``deadline``: the job's time limit (a
    verdict past it ends the job, its unit's finish rolled back); with ``follow`` it also reads
    whether other work waits and may claim the job's next check (``worker.claims.claim_follow_up``)."""

    def __init__(
        self, ctx: RunnerContext, prepared: PreparedJob, deadline: datetime | None = None, follow: bool = False
    ) -> None:
        self.ctx, self.prepared, self.deadline, self.follow = ctx, prepared, deadline, follow
        self.farm: FarmLink | None = None  # opened with the session, in each try of the transaction

    def open(self, db: Session, job: Job, collector: Collector) -> ReductionSession:
        if self.deadline is not None and utcnow() > self.deadline:
            raise JobTimedOutError(self.ctx.time_limit_s)  # (the unit's finish is rolled back with the transaction)
        reduction = self.ctx.live.take(db, self.prepared, job, collector)
        self.farm = FarmLink.open(self.ctx, db, job, reduction)
        return reduction

    def seed(self, reduction: ReductionSession) -> int:
        return self._farm().seed(self.ctx, reduction)

    def took(self, db: Session, job: Job, delivery: Delivery | None) -> None:
        farm = self._farm()
        if delivery is not None:
            _share(farm, delivery)
            if isinstance(delivery.answer, LayerwiseResult):
                keep_node_errors(self.ctx, db, job, delivery.answer)
        if farm.layerwise is not None:
            keep_node_errors(self.ctx, db, job, farm.layerwise)  # seeded from the farm: no run of its own

    def queue_next(self, db: Session, job: Job, reduction: ReductionSession) -> tuple[int, bool | None]:
        return _queue_next(self.ctx, db, job, reduction, self.follow and may_follow_up(self.ctx, job))

    def keep(self, db: Session, job: Job, reduction: ReductionSession) -> None:
        self.ctx.live.keep_after_commit(db, self.prepared, job, reduction)

    def follow_up(self, db: Session, job: Job, others_waiting: bool) -> tuple[CheckUnit, int] | None:
        return claim_follow_up(self.ctx, db, job, others_waiting) if self.follow else None

    def _farm(self) -> FarmLink:
        assert self.farm is not None, "the farm link opens with the session (open)"
        return self.farm


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


def announce(ctx: RunnerContext, job_id: str, outcome: Advanced) -> None:
    """After the commit: wake the SSE followers, and send one message per queued check but one:
    this worker goes on to take the next piece of work itself (a message only says "there is
    work", so the count is what matters, whichever work each worker then takes)."""
    if outcome.seq:
        ctx.notify(job_id, outcome.seq)
    for _ in range(outcome.queued - 1):
        ctx.wake(job_id, outcome.queue)
    if outcome.ended:
        cleanup_if_ended(ctx, job_id)


def cleanup_if_ended(ctx: RunnerContext, job_id: str) -> None:
    """An ended job's prepared model and scratch go (its stored artifacts stay)."""
    with ctx.db.session() as session:
        job = JobRepository(session).get(job_id)
        ended = job is None or job.status.terminal
    if ended:
        ctx.prepared.drop(job_id)
        shutil.rmtree(ctx.layout.work_dir(job_id), ignore_errors=True)

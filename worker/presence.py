"""A worker's presence in the farm: a heartbeat that, every ``WORKER_HEARTBEAT_S``,

* reports the worker (queues, capabilities, current job, busy time) in the ``workers`` table and
  drops the rows of workers silent for ``WORKER_FORGET_AFTER_S``;
* queues again the checks whose worker died (their lease ran out) and wakes a worker for each;
* kills check processes whose worker is gone (``checks.lifeline``);
* now and then deletes stored blobs that nothing refers to (``worker.maintenance``) and enforces
  retention.

A database that cannot be reached (at start or later) is retried with a growing pause (1 s, 2 s,
... up to 30 s), logged once per outage. Work itself is found by the worker's poll
(``worker.process``): the database is the queue, and messages only wake workers."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from checks.capabilities import Capabilities
from checks.lifeline import kill_orphaned_checks
from persistence.models import utcnow
from persistence.repositories import WorkerRepository, WorkerStatus
from persistence.repositories.units import UnitRepository
from persistence.retention import enforce_retention
from persistence.retry import transaction
from worker.context import RunnerContext
from worker.maintenance import sweep_unreferenced_blobs
from worker.stops import end_overdue_finishing

log = logging.getLogger("onnx_reducer.worker")
MAX_BACKOFF_S = 30.0
LOST_JOBS_SCAN = 200


@dataclass(frozen=True)
class WorkerIdentity:
    name: str
    host: str
    queues: tuple[str, ...]
    capabilities: Capabilities
    started_at: datetime = field(default_factory=utcnow)


class Activity:
    """What the worker is doing: written by the thread that runs jobs, read by the heartbeat."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current_job: str | None = None
        self.busy_since: datetime | None = None
        self.busy_s = 0.0
        self.jobs_done = 0
        self.on_change: Callable[[], None] = lambda: None

    def begin(self, job_id: str) -> None:
        with self._lock:
            self.current_job, self.busy_since = job_id, utcnow()
        self.on_change()

    def switch(self, job_id: str) -> None:
        """The worker moved on to work of another job (a check of it) within the same message."""
        with self._lock:
            if self.current_job is not None:
                self.current_job = job_id

    def end(self, worked: bool = True) -> None:
        """The wake-up is over; ``worked``: it took some work (counted in ``jobs_done``)."""
        with self._lock:
            if self.busy_since is not None:
                self.busy_s += (utcnow() - self.busy_since).total_seconds()
                self.jobs_done += int(worked)
            self.current_job, self.busy_since = None, None
        self.on_change()

    def status(self, identity: WorkerIdentity) -> WorkerStatus:
        with self._lock:
            return WorkerStatus(
                name=identity.name,
                host=identity.host,
                queues=list(identity.queues),
                capabilities=identity.capabilities.to_json(),
                current_job_id=self.current_job,
                busy_since=self.busy_since,
                busy_s=self.busy_s,
                jobs_done=self.jobs_done,
                started_at=identity.started_at,
            )


@dataclass(frozen=True)
class PresenceTimings:
    heartbeat_s: float
    forget_after_s: float
    sweep_interval_s: float
    sweep_min_age_s: float
    retention_interval_s: float = 600.0
    retention_max_age_s: float = 0.0  # 0: no age limit
    retention_max_team_bytes: int = 0  # 0: no size cap
    retention_min_age_s: float = 3600.0  # the size cap deletes no job that finished more recently


class WorkerPresence:
    """The heartbeat (module doc): ``beat``, a duty of the worker process's scheduler
    (``worker.process``), which runs it again after the pause it returns."""

    def __init__(
        self,
        ctx: RunnerContext,
        identity: WorkerIdentity,
        activity: Activity,
        timings: PresenceTimings,
    ) -> None:
        self.ctx, self.identity, self.activity, self.timings = ctx, identity, activity, timings
        self._failures = 0
        self._next_sweep = 0.0
        self._next_retention = 0.0

    def beat(self) -> float:
        """One heartbeat; the pause before the next (growing while the database cannot be reached)."""
        try:
            self.tick()
        except Exception as exc:  # noqa: BLE001 - the database or broker is down: retry
            self._failures += 1
            pause = min(2.0 ** (self._failures - 1), MAX_BACKOFF_S)
            if self._failures == 1:
                log.warning("worker heartbeat failed (%s: %s); retrying", type(exc).__name__, _first_line(exc))
            log.debug("heartbeat retry in %.0f s", pause)
            return pause
        if self._failures:
            log.info("worker heartbeat works again after %d failed attempts", self._failures)
        self._failures = 0
        return self.timings.heartbeat_s

    def remove(self) -> None:
        """This worker's row goes (a clean stop is not an outage)."""
        try:
            with self.ctx.db.session() as session:
                WorkerRepository(session).remove(self.identity.name)
        except Exception as exc:  # noqa: BLE001 - the row then ages out like a dead worker's
            log.warning("could not remove this worker's row (%s); it goes offline by itself", type(exc).__name__)

    def tick(self) -> None:
        with self.ctx.db.session() as session:
            workers = WorkerRepository(session)
            workers.report(self.activity.status(self.identity))
            workers.forget_silent(self.timings.forget_after_s)
        kill_orphaned_checks()
        self.ctx.layout.sweep_scratch()  # the scratch folders of this host's killed workers
        self._requeue_lost_checks()
        for job_id in end_overdue_finishing(self.ctx):
            log.info("job %s: out of time while finishing (nobody finished it); it ended", job_id)
        if time.monotonic() >= self._next_sweep:
            removed = sweep_unreferenced_blobs(self.ctx.db, self.ctx.layout.store, self.timings.sweep_min_age_s)
            if removed:
                log.info("removed %d stored blobs that nothing refers to", removed)
            self._next_sweep = time.monotonic() + self.timings.sweep_interval_s
        if time.monotonic() >= self._next_retention:
            self._enforce_retention()
            self._next_retention = time.monotonic() + self.timings.retention_interval_s

    def _enforce_retention(self) -> None:
        timings = self.timings
        if timings.retention_max_age_s <= 0 and timings.retention_max_team_bytes <= 0:
            return
        deleted = enforce_retention(
            self.ctx.db,
            self.ctx.layout,
            timings.retention_max_age_s,
            timings.retention_max_team_bytes,
            blob_grace=timings.sweep_min_age_s,
            min_age_s=timings.retention_min_age_s,
        )
        if deleted:
            log.info(
                "retention: deleted %d finished jobs (%s), %d stored blobs",
                len(deleted),
                ", ".join(job.job_id for job in deleted[:10]) + (", ..." if len(deleted) > 10 else ""),
                sum(job.blobs_removed for job in deleted),
            )

    def _requeue_lost_checks(self) -> None:
        """Checks whose worker died (their lease ran out) are queued again and announced."""
        requeued = transaction(
            self.ctx.db, lambda session: UnitRepository(session).requeue_expired(), "queueing lost checks again"
        )
        for job_id, queue in requeued:
            log.info("job %s: a check's worker is gone; the check is queued again", job_id)
            self.ctx.wake(job_id, queue)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""

"""A worker's presence in the farm: one background thread that, every ``WORKER_HEARTBEAT_S``,

* reports the worker (queues, capabilities, current job, busy time) in the ``workers`` table and
  drops the rows of workers silent for ``WORKER_FORGET_AFTER_S``;
* when this worker has been idle for ``DISPATCH_GRACE_S``, takes one lost job it can serve and
  sends it to its own queue (below);
* kills check processes whose worker is gone (``checks.lifeline``);
* now and then deletes stored blobs that nothing refers to (``worker.maintenance``).

A database that cannot be reached (at start or later) is retried with a growing pause (1 s, 2 s,
... up to 30 s), logged once per outage.

**Lost work.** A job can lose its message: a worker took it and died, or took it while the
database was down and could not claim it, or an enqueue failed, or the worker that got it could
not serve it (``requires``). Re-sending every queued job now and then would flood a busy farm, so
only an *idle* worker looks, and only for a job its queues and capabilities allow that no worker
works on (queued, or running with an expired lease) and whose last message is older than
``DISPATCH_GRACE_S`` (or parked). Had that message still been waiting in the broker, this idle
worker would have received it, so the message is gone: the worker records the new dispatch time
(conditionally, so of two idle workers one re-sends), removes any copy of the lost message from
Redis's unacknowledged set (so the broker's own redelivery does not fire as well) and sends the
job to its own queue. A busy worker never re-sends anything. An idle worker also removes the
unacknowledged messages of ended jobs (a killed worker's, whose job other workers finished)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from checks.capabilities import Capabilities, unmet
from checks.lifeline import kill_orphaned_checks
from checks.spec import requirements_of
from persistence.enums import JobStatus
from persistence.models import utcnow
from persistence.repositories import JobRepository, WorkerRepository, WorkerStatus
from persistence.repositories.units import UnitRepository
from persistence.retention import enforce_retention
from persistence.retry import transaction
from worker.context import RunnerContext
from worker.maintenance import sweep_unreferenced_blobs

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
        self._idle_since = time.monotonic()
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

    def end(self) -> None:
        with self._lock:
            if self.busy_since is not None:
                self.busy_s += (utcnow() - self.busy_since).total_seconds()
                self.jobs_done += 1
            self.current_job, self.busy_since = None, None
            self._idle_since = time.monotonic()
        self.on_change()

    def idle_for(self) -> float | None:
        """Seconds since the last job ended (or since start); None while a job runs."""
        with self._lock:
            return None if self.current_job is not None else time.monotonic() - self._idle_since

    def restart_idle_clock(self) -> None:
        with self._lock:
            self._idle_since = time.monotonic()

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
    dispatch_grace_s: float
    forget_after_s: float
    sweep_interval_s: float
    sweep_min_age_s: float
    retention_interval_s: float = 600.0
    retention_max_age_s: float = 0.0  # 0: no age limit
    retention_max_team_bytes: int = 0  # 0: no size cap


Resend = Callable[[str], None]  # sends a job to this worker's own queue
ForgetMessages = Callable[[str], int]  # removes a job's unacknowledged messages from the broker
# removes the unacknowledged messages of the jobs the callable picks as ended (of those it is given)
ForgetEnded = Callable[[Callable[[list[str]], set[str]]], int]


class WorkerPresence:
    """The heartbeat thread (module doc). ``resend`` None: this worker does not look for lost work
    (the embedded runner, whose queue lives in its own process)."""

    def __init__(
        self,
        ctx: RunnerContext,
        identity: WorkerIdentity,
        activity: Activity,
        timings: PresenceTimings,
        resend: Resend | None = None,
        forget_messages: ForgetMessages | None = None,
        forget_ended: ForgetEnded | None = None,
    ) -> None:
        self.ctx, self.identity, self.activity, self.timings = ctx, identity, activity, timings
        self.resend, self.forget_messages, self.forget_ended = resend, forget_messages, forget_ended
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="worker-presence", daemon=True)
        self._next_sweep = 0.0
        self._next_retention = 0.0
        activity.on_change = self._wake.set

    def start(self) -> WorkerPresence:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and remove this worker's row (a clean stop is not an outage)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        try:
            with self.ctx.db.session() as session:
                WorkerRepository(session).remove(self.identity.name)
        except Exception as exc:  # noqa: BLE001 - the row then ages out like a dead worker's
            log.warning("could not remove this worker's row (%s); it goes offline by itself", type(exc).__name__)

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - the database or broker is down: retry
                failures += 1
                pause = min(2.0 ** (failures - 1), MAX_BACKOFF_S)
                if failures == 1:
                    log.warning("worker heartbeat failed (%s: %s); retrying", type(exc).__name__, _first_line(exc))
                log.debug("heartbeat retry in %.0f s", pause)
            else:
                if failures:
                    log.info("worker heartbeat works again after %d failed attempts", failures)
                failures, pause = 0, self.timings.heartbeat_s
            self._wake.wait(pause)
            self._wake.clear()

    def tick(self) -> None:
        with self.ctx.db.session() as session:
            workers = WorkerRepository(session)
            workers.report(self.activity.status(self.identity))
            workers.forget_silent(self.timings.forget_after_s)
        kill_orphaned_checks()
        self._requeue_lost_checks()
        if self.resend is not None:
            self._take_lost_job()
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
            self.ctx.db, self.ctx.layout, timings.retention_max_age_s, timings.retention_max_team_bytes
        )
        if deleted:
            log.info(
                "retention: deleted %d finished jobs (%s), %d stored blobs",
                len(deleted),
                ", ".join(job.job_id for job in deleted[:10]) + (", ..." if len(deleted) > 10 else ""),
                sum(job.blobs_removed for job in deleted),
            )

    def _take_lost_job(self) -> None:
        idle = self.activity.idle_for()
        grace = self.timings.dispatch_grace_s
        if idle is None or idle < grace or self.resend is None:
            return
        self._forget_ended_messages()
        job_id = self._claim_dispatch(utcnow() - timedelta(seconds=grace))
        if job_id is None:
            self._take_waiting_check(grace)
            return
        forgotten = self.forget_messages(job_id) if self.forget_messages is not None else 0
        log.info(
            "job %s: no message reached an idle worker for %.0f s (lost, or left for a capable worker); "
            "this worker takes it%s",
            job_id,
            grace,
            f" (removed {forgotten} unacknowledged copies from the broker)" if forgotten else "",
        )
        self.activity.restart_idle_clock()  # one job per grace period: its message is on its way
        self.resend(job_id)

    def _forget_ended_messages(self) -> None:
        """Messages of ended jobs left in the broker's unacknowledged set (a worker killed while
        holding one, its job carried on by others) are removed, not redelivered hours later."""
        if self.forget_ended is None:
            return
        removed = self.forget_ended(self._ended)
        if removed:
            log.info("removed %d unacknowledged messages of ended jobs from the broker", removed)

    def _ended(self, job_ids: list[str]) -> set[str]:
        with self.ctx.db.session() as session:
            jobs = JobRepository(session)
            return {j for j in job_ids if (job := jobs.get(j)) is None or JobStatus(job.status).terminal}

    def _requeue_lost_checks(self) -> None:
        """Checks whose worker died (their lease ran out) are queued again and announced."""
        requeued = transaction(
            self.ctx.db, lambda session: UnitRepository(session).requeue_expired(), "queueing lost checks again"
        )
        for job_id, queue in requeued:
            log.info("job %s: a check's worker is gone; the check is queued again", job_id)
            self.ctx.wake(job_id, queue)

    def _take_waiting_check(self, grace: float) -> None:
        """An idle worker takes a check queued for longer than the grace (its message was lost)."""
        with self.ctx.db.session() as session:
            job_id = UnitRepository(session).waiting_job(self.identity.queues, utcnow() - timedelta(seconds=grace))
        if job_id is not None and self.resend is not None:
            self.activity.restart_idle_clock()
            self.resend(job_id)

    def _claim_dispatch(self, sent_before: datetime) -> str | None:
        """The oldest lost job this worker can serve, marked as dispatched now (or None)."""
        with self.ctx.db.session() as session:
            jobs = JobRepository(session)
            for job in jobs.lost(self.identity.queues, sent_before, LOST_JOBS_SCAN):
                if unmet(requirements_of(job.check_spec), self.identity.capabilities):
                    continue
                if jobs.mark_dispatched(job.id, sent_before):
                    return job.id
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""

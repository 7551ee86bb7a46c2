"""One worker process in the farm, one object (``WorkerProcess``): its name, queues and
capabilities, what it is doing (``Activity``), and ONE scheduler (``worker.scheduler``) for its
periodic duties: its heartbeat (``worker.presence``), the cancel watch over the jobs it prepares
(``worker.cancel_watch``) and its poll for work while idle. Built by the Celery app for each
worker process (one piece of work at a time: the solo pool, as deployed) and by the embedded
server for each of its slots; ``start`` / ``stop`` begin and end its duties.

The database is the queue; a message only wakes a worker (``work``). The poll is the rest: while
the worker is idle it looks in the database every ``WORKER_POLL_S`` (``run_job.waiting_job``) and
takes what it finds, so work whose message was lost (an enqueue that failed, a Redis outage, a
worker killed holding one) or that a dead worker left (its leases ran out) is taken all the same.
The wake-up and the poll share one lock: the wake-up waits for it (a Celery worker consumes no
further message while its task runs, so wake-ups go to idle workers); the poll skips its turn.

Either way the work is the work loop (``worker.run_job``: ``take`` a claim from the database,
``claim.run``, until none is left that it may take; run here, by ``work`` itself, or in a job
process of the embedded server's, ``run_elsewhere``), with the ``Activity`` kept up to date for
the heartbeat, and a database that cannot be
reached logged in one line: the work stays in the database, where this worker or another finds it
once it is back."""

from __future__ import annotations

import enum
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence

from sqlalchemy.exc import SQLAlchemyError

from checks.capabilities import detect_capabilities, parse_gpu_names
from persistence.contracts import QUEUE_GPU
from persistence.jsonlog import bind_job
from persistence.repositories import ClaimResult
from persistence.retry import MAX_TRIES, is_conflict, is_unreachable, sqlstate_of
from worker.cancel_watch import CANCEL_LOOK_S, cancel_watch
from worker.context import RunnerContext, worker_name
from worker.presence import Activity, PresenceTimings, WorkerIdentity, WorkerPresence
from worker.release_envs import load_runtime_envs, with_runtime_envs
from worker.run_job import nothing_taken, take, waiting_job
from worker.scheduler import Scheduler
from worker.settings import WorkerSettings

log = logging.getLogger("onnx_reducer.worker")


class Delivery(enum.StrEnum):
    RAN = "ran"  # this worker took some work
    ENDED = "ended"  # the job it was woken for has ended, and nothing else was left to take
    HELD = "held"  # nothing to take: other workers are at the job it was woken for
    NO_DATABASE = "no-database"  # the database could not be reached: the work is taken once it is back
    BUSY = "busy"  # this worker has work in hand (a poll skips its turn)


_DELIVERY = {ClaimResult.CLAIMED: Delivery.RAN, ClaimResult.BUSY: Delivery.HELD, ClaimResult.FINISHED: Delivery.ENDED}


def lower_priority(niceness: int) -> int:
    """Lower the calling thread's CPU priority to ``niceness`` (what it starts from now on
    inherits it: the checks); never raises it. Returns the niceness now in effect. Checks are
    batch work: an api, a database or a browser on the same machine should not wait for them."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if niceness > current:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
        return niceness
    return current


def presence_timings(settings: WorkerSettings) -> PresenceTimings:
    return PresenceTimings(
        heartbeat_s=settings.worker_heartbeat_s,
        forget_after_s=settings.worker_forget_after_s,
        sweep_interval_s=settings.blob_sweep_interval_s,
        sweep_min_age_s=settings.blob_sweep_min_age_s,
        retention_interval_s=settings.retention_interval_s,
        retention_max_age_s=settings.retention_max_age_s,
        retention_max_team_bytes=settings.retention_max_team_bytes,
        retention_min_age_s=settings.retention_min_age_s,
    )


class WorkerProcess:
    """One worker process (module doc)."""

    def __init__(
        self,
        settings: WorkerSettings,
        ctx: RunnerContext,
        queues: Sequence[str],
        name: str | None = None,
        gpu_queue_needs_gpu: bool = False,
    ) -> None:
        """``gpu_queue_needs_gpu`` (the embedded server's slots, which take every queue's work):
        the gpu queue is listed only when this machine has a GPU (a slot without one can run none
        of that queue's checks)."""
        gpus = parse_gpu_names(settings.worker_gpus) if settings.worker_gpus is not None else None
        envs = load_runtime_envs(settings.runtime_envs)
        capabilities = with_runtime_envs(detect_capabilities(gpus), envs)
        if gpu_queue_needs_gpu and not capabilities.gpus:
            queues = [queue for queue in queues if queue != QUEUE_GPU]
        self.identity = WorkerIdentity(
            name=name or worker_name(), host=socket.gethostname(), queues=tuple(queues), capabilities=capabilities
        )
        ctx.capabilities = self.identity.capabilities
        ctx.runtime_envs = envs
        ctx.runtime = self.identity.capabilities  # the runtime its jobs' verdicts are shared under
        self.ctx, self.poll_s = ctx, settings.worker_poll_s
        self.activity = Activity()
        # the work loop run elsewhere: the embedded server's job process (None: here, ``work``)
        self.run_elsewhere: Callable[[str, RunnerContext], ClaimResult] | None = None
        self.presence = WorkerPresence(ctx, self.identity, self.activity, presence_timings(settings))
        self.scheduler = Scheduler(self.identity.name)
        self._working = threading.Lock()
        self._failing = False

    def start(self, poll: bool = True, watch_cancels: bool = True) -> WorkerProcess:
        """Its duties begin: the heartbeat, and unless told otherwise the poll and the cancel
        watch (an embedded slot looks for work itself, and its jobs run in processes of their own)."""
        beat = self.scheduler.every(self.presence.timings.heartbeat_s, self.presence.beat, "presence", first_s=0.0)
        self.activity.on_change = lambda: self.scheduler.wake(beat)
        if poll:
            self.scheduler.every(self.poll_s, self.look, "poll")
        if watch_cancels:  # a cancel reaches a job in preparation at once
            self.scheduler.every(CANCEL_LOOK_S, cancel_watch(self.ctx), "cancel-watch")
        self.scheduler.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """No duty starts again (work taken already runs to its end, or to the process's); this
        worker's row goes."""
        self.scheduler.stop(timeout)
        self.presence.remove()

    def work(self, job_id: str, wait: bool = True) -> Delivery:
        """Take work, starting from the wake-up for ``job_id`` (work of any job may be taken), once
        the work in hand is done; with ``wait=False`` BUSY at once while there is work in hand."""
        if not self._working.acquire(blocking=wait):
            return Delivery.BUSY
        delivery = Delivery.NO_DATABASE
        with bind_job(job_id):
            self.activity.begin(job_id)
            try:
                if self.run_elsewhere is not None:
                    delivery = _DELIVERY[self.run_elsewhere(job_id, self.ctx)]
                else:  # the work loop (``worker.run_job``), here: a verdict is stored 4 calls from the task
                    claim = take(self.ctx)
                    worked = claim is not None
                    while claim is not None:
                        claim = claim.run(self.ctx) or take(self.ctx)
                    delivery = Delivery.RAN if worked else _DELIVERY[nothing_taken(job_id, self.ctx)]
            except SQLAlchemyError as exc:
                _log_database_error(job_id, exc)
            finally:
                self.activity.end(worked=delivery is Delivery.RAN)
                self._working.release()
        return delivery

    def poll(self) -> Delivery | None:
        """One look: None when the worker is busy or nothing waits that it may take."""
        if self._working.locked():
            return None
        job_id = waiting_job(self.ctx)
        if job_id is None:
            return None
        log.debug("job %s has work waiting in the database; this idle worker takes it", job_id)
        delivery = self.work(job_id, wait=False)  # a wake-up may have come first: it takes the work
        return None if delivery is Delivery.BUSY else delivery

    def look(self) -> None:
        """``poll``, with a database that cannot be reached logged once per outage."""
        try:
            self.poll()
        except Exception as exc:  # noqa: BLE001 - the database is away: look again later
            if not self._failing:
                log.warning("looking for work failed (%s); looking again later", type(exc).__name__)
            self._failing = True
        else:
            self._failing = False


def _log_database_error(job_id: str, exc: SQLAlchemyError) -> None:
    state = sqlstate_of(exc)
    if is_conflict(exc):
        log.warning(
            "job %s: PostgreSQL kept aborting a transaction as it crossed other workers' "
            "(%s, SQLSTATE %s, after %d tries); the work is taken again later",
            *(job_id, type(exc).__name__, state, MAX_TRIES),
        )
    elif is_unreachable(exc):
        log.warning(
            "job %s: the database is unreachable (%s%s: %s); the work is taken once it is back",
            *(job_id, type(exc).__name__, f", SQLSTATE {state}" if state else "", _first_line(exc)),
        )
    else:
        log.error(
            "job %s: the database refused a statement (%s%s: %s); the work is taken again later",
            *(job_id, type(exc).__name__, f", SQLSTATE {state}" if state else "", _first_line(exc)),
        )


def _first_line(exc: SQLAlchemyError) -> str:
    """The driver's message, first line (no SQL, no parameters)."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0][:200] if lines else ""

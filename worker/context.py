"""What ``run_job`` needs from its host (Celery worker or embedded server), built once per process."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from checks.capabilities import Capabilities
from checks.runtime_envs import RuntimeEnv
from persistence.contracts import QUEUES, Enqueue, Notifier, no_notify
from persistence.db import Database
from persistence.fairshare import parse_shares
from persistence.layout import DataLayout
from worker.kept_jobs import PerThreadJobs
from worker.live_session import LiveSessions
from worker.preparing import Preparing
from worker.settings import WorkerSettings
from worker.unit_lease import LeaseKeeper


def no_wake(job_id: str, queue: str) -> None:
    """No messages to send: the embedded runner's slots look for work in the database."""


class FarmSize:
    """How many workers serve each queue, as this process read it at most ``ttl_s`` ago: a job's
    slots are counted at every verdict, and the farm changes only when a worker starts or stops."""

    def __init__(self, ttl_s: float = 1.0) -> None:
        self.ttl_s = ttl_s
        self._read: dict[str, tuple[float, int]] = {}

    def workers(self, queue: str, read: Callable[[], int]) -> int:
        """The count for ``queue``: the last one read, or ``read()`` once that is older than ``ttl_s``."""
        now = time.monotonic()
        last = self._read.get(queue)
        if last is None or now - last[0] > self.ttl_s:
            last = self._read[queue] = (now, read())
        return last[1]


def worker_name() -> str:
    """Unique while the process runs: the host and the process id (the worker a check ran on)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class RunnerContext:
    db: Database
    layout: DataLayout
    lease_s: float
    max_attempts: int
    time_limit_s: float
    allow_command: bool
    check_memory_limit_bytes: int | None = None
    notify: Notifier = no_notify
    # announces queued checks of a job to the workers of its queue (a Celery message each)
    wake: Enqueue = no_wake
    max_workers_per_job: int = 8
    team_max_running_checks: int = 0
    team_shares: dict[str, float] = field(default_factory=dict)
    worker_seen_s: float = 60.0  # a worker with a heartbeat this recent counts as a free slot
    farm_size: FarmSize = field(default_factory=FarmSize)  # those workers, counted at most once a second
    worker: str = field(default_factory=worker_name)
    queues: tuple[str, ...] = QUEUES  # the queues whose work this process takes
    capabilities: Capabilities | None = None  # what this worker offers (None: it takes any job)
    runtime_envs: tuple[RuntimeEnv, ...] = ()  # other onnxruntime releases' environments (RUNTIME_ENVS)
    on_work: Callable[[str], None] = field(default=lambda job_id: None)  # the job whose work it takes now
    # what this worker runs checks on (set by ``WorkerProcess``); None: unknown, verdicts not shared
    runtime: Capabilities | None = None
    farm_verdict_cache: bool = True
    share_verdicts_across_teams: bool = False
    # what this process (an embedded slot: this slot) owns, one of each per context (``slot_context``)
    preparing: Preparing = field(default_factory=Preparing)  # the jobs it prepares now (``worker.cancel_watch``)
    live: LiveSessions = field(default_factory=LiveSessions)  # how its sessions were obtained (``worker.live_session``)
    leases: LeaseKeeper = field(init=False)  # the leases it renews under its terms (``worker.unit_lease``)
    prepared: PerThreadJobs = field(default_factory=PerThreadJobs)  # the jobs it keeps prepared, per thread

    def __post_init__(self) -> None:
        self.leases = LeaseKeeper(self)  # a copy (``slot_context``) gets its own, bound to it


def slot_context(ctx: RunnerContext, worker: str) -> RunnerContext:
    """A copy of ``ctx`` for another worker in this Python process (an embedded slot): its own name
    and its own process state (what the defaults of ``RunnerContext`` make fresh); the database,
    the settings and the wake-up shared."""
    return dataclasses.replace(ctx, worker=worker, preparing=Preparing(), live=LiveSessions(), prepared=PerThreadJobs())


def context_from_settings(settings: WorkerSettings, notify: Notifier = no_notify) -> RunnerContext:
    return RunnerContext(
        db=Database(settings.database_url),
        layout=DataLayout(settings.data_dir.resolve(), settings.s3_config()),
        lease_s=settings.job_lease_s,
        max_attempts=settings.max_attempts,
        time_limit_s=settings.job_time_limit_s,
        allow_command=settings.allow_command_checks,
        check_memory_limit_bytes=settings.check_memory_limit_bytes or None,
        notify=notify,
        max_workers_per_job=settings.max_workers_per_job,
        team_max_running_checks=settings.team_max_running_checks,
        team_shares=parse_shares(settings.team_shares),
        worker_seen_s=max(3 * settings.worker_heartbeat_s, 5.0),
        farm_verdict_cache=settings.farm_verdict_cache,
        share_verdicts_across_teams=settings.share_verdicts_across_teams,
    )

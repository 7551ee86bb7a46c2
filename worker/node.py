"""One worker process in the farm: its name, queues and capabilities, what it is doing, its
heartbeat (``WorkerPresence``), what it does when woken (``JobHandler``) and its look for work
while idle (``WorkPoller``). Built by the Celery app for each worker process (one piece of work at
a time: the solo pool, as deployed) and by the embedded server for each of its slots."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from checks.capabilities import detect_capabilities, parse_gpu_names
from persistence.contracts import QUEUE_GPU
from worker.context import RunnerContext
from worker.poll import WorkPoller
from worker.presence import Activity, PresenceTimings, WorkerIdentity, WorkerPresence
from worker.release_envs import load_runtime_envs, with_runtime_envs
from worker.runner import JobHandler
from worker.settings import WorkerSettings


def worker_name() -> str:
    """Unique while the process runs: the host and the process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


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


class WorkerNode:
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
            name=name or worker_name(),
            host=socket.gethostname(),
            queues=tuple(queues),
            capabilities=capabilities,
        )
        ctx.capabilities = self.identity.capabilities
        ctx.runtime_envs = envs
        ctx.runtime = self.identity.capabilities  # the runtime its jobs' verdicts are shared under
        self.activity = Activity()
        self.handler = JobHandler(ctx, self.activity)
        self.presence = WorkerPresence(ctx, self.identity, self.activity, presence_timings(settings))
        self.poller = WorkPoller(self.handler, settings.worker_poll_s)

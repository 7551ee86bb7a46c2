"""What ``run_job`` needs from its host (Celery worker or embedded server), built once per process."""

from __future__ import annotations

from dataclasses import dataclass

from checks.capabilities import Capabilities
from persistence.contracts import Notifier, no_notify
from persistence.db import Database
from persistence.layout import DataLayout
from worker.settings import WorkerSettings


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
    # what this worker runs checks on (set by ``WorkerNode``); None: unknown, verdicts not shared
    runtime: Capabilities | None = None
    farm_verdict_cache: bool = True
    share_verdicts_across_teams: bool = False


def context_from_settings(settings: WorkerSettings, notify: Notifier = no_notify) -> RunnerContext:
    return RunnerContext(
        db=Database(settings.database_url),
        layout=DataLayout(settings.data_dir.resolve()),
        lease_s=settings.job_lease_s,
        max_attempts=settings.max_attempts,
        time_limit_s=settings.job_time_limit_s,
        allow_command=settings.allow_command_checks,
        check_memory_limit_bytes=settings.check_memory_limit_bytes or None,
        notify=notify,
        farm_verdict_cache=settings.farm_verdict_cache,
        share_verdicts_across_teams=settings.share_verdicts_across_teams,
    )

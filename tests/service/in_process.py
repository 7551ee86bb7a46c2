"""``run_job``'s own steps driven from a test, in this process against PostgreSQL: a worker
context that runs one check at a time, and a job submitted and started by it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.service.helpers import submit
from worker.context import RunnerContext, context_from_settings
from worker.job_start import start_job
from worker.run_job import StartJob, take
from worker.settings import WorkerSettings


def in_process_context(db_url: str, data_dir: Path, **settings: Any) -> Iterator[RunnerContext]:
    """A worker's context for ``run_job``'s steps run in this process (leases of 60 s unless
    ``settings`` say otherwise)."""
    values: dict[str, Any] = {"job_lease_s": 60.0} | settings
    ctx = context_from_settings(WorkerSettings(database_url=db_url, data_dir=data_dir, **values))
    yield ctx
    ctx.db.dispose()


def one_check_context(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    """One check at a time; no farm cache: a test's second job of the same model runs its checks."""
    yield from in_process_context(db_url, data_dir, max_workers_per_job=1, farm_verdict_cache=False)


def start_here(client: httpx.Client, ctx: RunnerContext, model: bytes) -> str:
    """Submit ``model``; this process takes the job (fair share's first pick) and starts it."""
    job_id = str(submit(client, model).json()["id"])
    started = take(ctx)
    assert isinstance(started, StartJob) and started.job_id == job_id
    start_job(ctx, job_id)
    return job_id

"""One embedded job process: ``python -m worker.local_child JOB_ID`` with the worker settings as
JSON on stdin (``-`` for JOB_ID: a *spare*, which the server starts ahead, ``worker.local.LocalRunner``:
the settings are stdin's first line, sent at once; the spare sets itself up, connects to the
database and looks at the queue once, so the statements a take runs are ready, prints ``READY``
and waits for its job id on the next line: an upload's wake-up then only has the claim left to do)
(and, optionally, the embedded worker's capabilities as JSON: the runtime its
verdicts are shared under, and the name of the slot it works for). The embedded server runs its
work this way so that a reduction's Python work (candidates, models written, verdicts stored)
never competes with the api for its GIL. Prints
the claim result of JOB_ID's message (``claimed``, ``busy``, ``finished``) as the last line.

After its work runs out the process lingers for ``LINGER_S``, looking for new work every
``LOOK_S`` (the checks another slot queues: a job process cannot message the server's slots), so
a slot's process stays warm while a job's checks come and go instead of starting anew for each."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

from sqlalchemy.exc import SQLAlchemyError

from checks.capabilities import Capabilities
from checks.lifeline import die_with_parent_now
from persistence.jsonlog import configure_logging
from persistence.repositories import ClaimResult
from worker.advance import cleanup_if_ended
from worker.cancel_watch import CANCEL_LOOK_S, cancel_watch
from worker.context import RunnerContext, context_from_settings
from worker.process import lower_priority
from worker.release_envs import advertised_envs
from worker.run_job import run_job, waiting_job
from worker.scheduler import Scheduler
from worker.settings import WorkerSettings

LINGER_S = 5.0
LOOK_S = 0.2
READY = "ready"  # a spare's first line out: set up and connected, waiting for its job id


def main(argv: list[str]) -> int:
    die_with_parent_now()  # the embedded server's death ends this job process (and its checks)
    spare = argv[0] == "-"
    sent = sys.stdin.readline() if spare else sys.stdin.read()
    if not sent.strip():
        return 0  # the server stopped before this spare was set up
    settings = WorkerSettings.model_validate_json(sent)
    lower_priority(settings.worker_nice)  # the api beside it answers first
    configure_logging()
    ctx = context_from_settings(settings)
    ctx.layout.use_scratch()  # temporary files under DATA_DIR/scratch, swept once this process is gone
    if len(argv) > 1:
        # the slot's runtime and capabilities: it takes only the work its slot may
        ctx.runtime = ctx.capabilities = Capabilities.from_json(json.loads(argv[1]))
        ctx.runtime_envs = advertised_envs(settings.runtime_envs, ctx.capabilities)  # probed by the slot
    if len(argv) > 2:
        ctx.worker = argv[2]  # the embedded slot this process works for: its checks show under that name
    job_id = _wait_ready(ctx) if spare else argv[0]
    if not job_id:
        ctx.db.dispose()
        return 0  # the server stopped before it had a job for this spare
    watch = cancel_watch(ctx, lambda jobs: _exit_after_cancel(ctx, jobs))  # a cancel reaches a job in preparation
    Scheduler("job-process").start().every(CANCEL_LOOK_S, watch, "cancel-watch")
    try:
        result = run_job(job_id, ctx)
        _linger(ctx)
    finally:
        ctx.db.dispose()
    print(result.value, flush=True)
    return 0


def _wait_ready(ctx: RunnerContext) -> str:
    """A spare's set-up before its job comes: one look at the queue (the database connected, the
    take's statements compiled), ``READY`` printed; then the job id the server sends (empty: none)."""
    with contextlib.suppress(SQLAlchemyError):  # only a warm-up: the take itself says what is wrong
        waiting_job(ctx)
    print(READY, flush=True)
    return sys.stdin.readline().strip()  # (a spare waits here)


def _exit_after_cancel(ctx: RunnerContext, cancelled: list[str]) -> None:
    """A job this process prepared was cancelled and ended: its folder goes, and this process
    exits now, freeing the model's memory (the server's slot starts a fresh one for its next work)."""
    for job_id in cancelled:
        cleanup_if_ended(ctx, job_id)
    print(ClaimResult.FINISHED.value, flush=True)
    os._exit(0)


def _linger(ctx: RunnerContext) -> None:
    deadline = time.monotonic() + LINGER_S
    while time.monotonic() < deadline:
        time.sleep(LOOK_S)
        job_id = waiting_job(ctx)
        if job_id is not None:
            run_job(job_id, ctx)
            deadline = time.monotonic() + LINGER_S


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

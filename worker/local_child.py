"""One embedded job process: ``python -m worker.local_child JOB_ID`` with the worker settings as
JSON on stdin (and, optionally, the embedded worker's capabilities as JSON: the runtime its
verdicts are shared under, and the name of the slot it works for). The embedded server runs its
work this way so that a reduction's Python work (candidates, models written, verdicts stored)
never competes with the api for its GIL. Prints
the claim result of JOB_ID's message (``claimed``, ``busy``, ``finished``) as the last line.

After its work runs out the process lingers for ``LINGER_S``, looking for new work every
``LOOK_S`` (the checks another slot queues: a job process cannot message the server's slots), so
a slot's process stays warm while a job's checks come and go instead of starting anew for each."""

from __future__ import annotations

import json
import sys
import time

from checks.capabilities import Capabilities
from checks.lifeline import die_with_parent_now
from persistence.jsonlog import configure_logging
from persistence.repositories.units import UnitRepository
from worker.context import RunnerContext, context_from_settings
from worker.node import lower_priority
from worker.run_job import run_job
from worker.settings import WorkerSettings

LINGER_S = 5.0
LOOK_S = 0.2


def main(argv: list[str]) -> int:
    die_with_parent_now()  # the embedded server's death ends this job process (and its checks)
    settings = WorkerSettings.model_validate_json(sys.stdin.read())
    lower_priority(settings.worker_nice)  # the api beside it answers first
    configure_logging()
    ctx = context_from_settings(settings)
    if len(argv) > 1:
        ctx.runtime = Capabilities.from_json(json.loads(argv[1]))
    if len(argv) > 2:
        ctx.worker = argv[2]  # the embedded slot this process works for: its checks show under that name
    try:
        result = run_job(argv[0], ctx)
        _linger(ctx)
    finally:
        ctx.db.dispose()
    print(result.value, flush=True)
    return 0


def _linger(ctx: RunnerContext) -> None:
    deadline = time.monotonic() + LINGER_S
    while time.monotonic() < deadline:
        time.sleep(LOOK_S)
        with ctx.db.session() as session:
            work = UnitRepository(session).available_work(ctx.queues, ctx.max_attempts, limit=1)
        if work:
            run_job(work[0].job_id, ctx)
            deadline = time.monotonic() + LINGER_S


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""One embedded job in a child process: ``python -m worker.local_child JOB_ID`` with the worker
settings as JSON on stdin (and, optionally, the embedded worker's capabilities as JSON: the runtime
its verdicts are shared under). The embedded server runs its jobs this way so that a reduction's Python
work (candidates, models written, verdicts stored) never competes with the api for its GIL. Prints
the claim result (``claimed``, ``busy``, ``finished``) as the last line."""

from __future__ import annotations

import json
import sys

from checks.capabilities import Capabilities
from checks.lifeline import die_with_parent_now
from persistence.jsonlog import configure_logging
from worker.context import context_from_settings
from worker.run_job import run_job
from worker.settings import WorkerSettings


def main(argv: list[str]) -> int:
    die_with_parent_now()  # the embedded server's death ends this job process (and its checks)
    settings = WorkerSettings.model_validate_json(sys.stdin.read())
    configure_logging()
    ctx = context_from_settings(settings)
    if len(argv) > 1:
        ctx.runtime = Capabilities.from_json(json.loads(argv[1]))
    try:
        result = run_job(argv[0], ctx)
    finally:
        ctx.db.dispose()
    print(result.value, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

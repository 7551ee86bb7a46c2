"""Embedded mode's runner: one background thread that calls the same ``run_job`` as the Celery
task, fed by the api after each commit. On start it picks up jobs a previous server left behind."""

from __future__ import annotations

import logging
import queue
import threading
import time

from persistence.repositories import ClaimResult
from worker.context import RunnerContext
from worker.recovery import requeue_orphans
from worker.run_job import run_job

log = logging.getLogger("onnx_reducer.worker")
_STOP = ""


class LocalRunner:
    def __init__(self, ctx: RunnerContext) -> None:
        self.ctx = ctx
        self.jobs: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="local-runner", daemon=True)

    def __call__(self, job_id: str, queue: str) -> None:
        """The api's ``Enqueue``: every queue runs here in embedded mode."""
        self.jobs.put(job_id)

    def start(self) -> LocalRunner:
        self.thread.start()
        requeue_orphans(self.ctx, self, queued_older_than_s=0.0)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.jobs.put(_STOP)
        self.thread.join(timeout)
        self.ctx.db.dispose()

    def _loop(self) -> None:
        while (job_id := self.jobs.get()) != _STOP:
            try:
                if run_job(job_id, self.ctx) is ClaimResult.BUSY:
                    threading.Timer(self.ctx.lease_s, self.jobs.put, args=(job_id,)).start()
            except Exception:
                log.exception("job %s failed in the local runner", job_id)
                time.sleep(0.1)

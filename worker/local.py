"""Embedded mode's runner: one background thread that handles jobs like a Celery worker does
(the same ``JobHandler`` and ``run_job``), fed by the api after each commit. It shows in the
farm's worker list like any worker. On start it picks up jobs a previous server left behind."""

from __future__ import annotations

import logging
import queue
import threading
import time

from checks.lifeline import kill_orphaned_checks, mark_owner
from persistence.contracts import QUEUES
from worker.context import RunnerContext
from worker.node import WorkerNode
from worker.recovery import requeue_orphans
from worker.runner import Delivery
from worker.settings import WorkerSettings

log = logging.getLogger("onnx_reducer.worker")
_STOP = ""


class LocalRunner:
    def __init__(self, ctx: RunnerContext, settings: WorkerSettings | None = None) -> None:
        self.ctx = ctx
        self.jobs: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="local-runner", daemon=True)
        self.node = WorkerNode(settings or WorkerSettings(), ctx, QUEUES)

    def __call__(self, job_id: str, queue: str) -> None:
        """The api's ``Enqueue``: every queue runs here in embedded mode."""
        self.jobs.put(job_id)

    def start(self) -> LocalRunner:
        mark_owner()
        kill_orphaned_checks()
        self.thread.start()
        self.node.presence.start()
        requeue_orphans(self.ctx, self, queued_older_than_s=0.0)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.jobs.put(_STOP)
        self.thread.join(timeout)
        self.node.presence.stop()
        self.ctx.db.dispose()

    def _loop(self) -> None:
        while (job_id := self.jobs.get()) != _STOP:
            try:
                if self.node.handler.handle(job_id) in (Delivery.HELD, Delivery.NO_DATABASE):
                    threading.Timer(self.ctx.lease_s, self.jobs.put, args=(job_id,)).start()
            except Exception:
                log.exception("job %s failed in the local runner", job_id)
                time.sleep(0.1)

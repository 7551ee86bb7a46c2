"""Embedded mode's runner: one background thread that handles jobs like a Celery worker does
(the same ``JobHandler`` and ``run_job``), fed by the api after each commit. It shows in the
farm's worker list like any worker. On start it picks up jobs a previous server left behind.

With ``jobs_in_child`` (what ``onnx-reducer serve`` uses) each ``run_job`` runs in a child process
(``worker.local_child``), so a reduction's Python work never competes with the api for its GIL."""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import sys
import threading
import time

from checks.lifeline import kill_orphaned_checks, mark_owner
from persistence.contracts import QUEUES
from persistence.repositories import ClaimResult
from worker.context import RunnerContext
from worker.node import WorkerNode
from worker.recovery import requeue_orphans
from worker.runner import Delivery
from worker.settings import WorkerSettings

log = logging.getLogger("onnx_reducer.worker")
_STOP = ""


class LocalRunner:
    def __init__(self, ctx: RunnerContext, settings: WorkerSettings | None = None, jobs_in_child: bool = False) -> None:
        self.ctx = ctx
        self.settings = settings or WorkerSettings()
        self.jobs: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="local-runner", daemon=True)
        self.node = WorkerNode(self.settings, ctx, QUEUES)
        self.child: subprocess.Popen[str] | None = None
        if jobs_in_child:
            self.node.handler.run_job = self._run_in_child

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
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()  # its lease expires; the next start resumes the job
        self.thread.join(timeout)
        self.node.presence.stop()
        self.ctx.db.dispose()

    def _run_in_child(self, job_id: str, ctx: RunnerContext) -> ClaimResult:
        """``run_job`` in ``python -m worker.local_child`` (the settings on its stdin, this worker's
        runtime as an argument: the child does not probe it again)."""
        runtime = json.dumps(self.node.identity.capabilities.to_json())
        command = [sys.executable, "-m", "worker.local_child", job_id, runtime]
        self.child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        output, _ = self.child.communicate(self.settings.model_dump_json())
        lines = output.strip().splitlines()
        if self.child.returncode != 0 or not lines:
            raise RuntimeError(f"the job process of {job_id} exited with code {self.child.returncode}")
        return ClaimResult(lines[-1])

    def _loop(self) -> None:
        while (job_id := self.jobs.get()) != _STOP:
            try:
                if self.node.handler.handle(job_id) in (Delivery.HELD, Delivery.NO_DATABASE):
                    threading.Timer(self.ctx.lease_s, self.jobs.put, args=(job_id,)).start()
            except Exception:
                log.exception("job %s failed in the local runner", job_id)
                time.sleep(0.1)

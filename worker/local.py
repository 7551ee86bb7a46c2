"""Embedded mode's runner: one background thread that calls the same ``run_job`` as the Celery
task, fed by the api after each commit. On start it picks up jobs a previous server left behind."""

from __future__ import annotations

import logging
import queue
import subprocess
import sys
import threading
import time

from persistence.repositories import ClaimResult
from worker.context import RunnerContext
from worker.recovery import requeue_orphans
from worker.run_job import run_job
from worker.settings import WorkerSettings

log = logging.getLogger("onnx_reducer.worker")
_STOP = ""


class LocalRunner:
    """``settings`` given: each job runs in a child process (``worker.local_child``), so its Python
    work never holds the api's GIL; otherwise in this thread."""

    def __init__(self, ctx: RunnerContext, settings: WorkerSettings | None = None) -> None:
        self.ctx, self.settings = ctx, settings
        self.jobs: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="local-runner", daemon=True)
        self.child: subprocess.Popen[str] | None = None

    def __call__(self, job_id: str, queue: str) -> None:
        """The api's ``Enqueue``: every queue runs here in embedded mode."""
        self.jobs.put(job_id)

    def start(self) -> LocalRunner:
        self.thread.start()
        requeue_orphans(self.ctx, self, queued_older_than_s=0.0)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.jobs.put(_STOP)
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()  # its lease expires; the next start resumes the job
        self.thread.join(timeout)
        self.ctx.db.dispose()

    def _run(self, job_id: str) -> ClaimResult:
        if self.settings is None:
            return run_job(job_id, self.ctx)
        command = [sys.executable, "-m", "worker.local_child", job_id]
        self.child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        output, _ = self.child.communicate(self.settings.model_dump_json())
        lines = output.strip().splitlines()
        if self.child.returncode != 0 or not lines:
            raise RuntimeError(f"the job process of {job_id} exited with code {self.child.returncode}")
        return ClaimResult(lines[-1])

    def _loop(self) -> None:
        while (job_id := self.jobs.get()) != _STOP:
            try:
                if self._run(job_id) is ClaimResult.BUSY:
                    threading.Timer(self.ctx.lease_s, self.jobs.put, args=(job_id,)).start()
            except Exception:
                log.exception("job %s failed in the local runner", job_id)
                time.sleep(0.1)

"""Embedded mode's runner: ``LOCAL_WORKERS`` slots (threads) that handle work like Celery workers
do (the same ``WorkerProcess`` and ``run_job``), woken by the api after each commit.
Each slot shows in the farm's worker list like a worker, so a job's checks spread over the slots as
over a farm. A slot with nothing handed to it looks in the database every ``POLL_S`` (the checks
queued by a job process cannot reach this process's queue; the jobs a previous server left
behind are found the same way).

With ``jobs_in_child`` (what ``onnx-reducer serve`` uses) each ``run_job`` runs in a child process
(``worker.local_child``), so a reduction's Python work never competes with the api for its GIL.
Each slot keeps one such process started ahead (a *spare*: its imports done, it waits for a job id
on its stdin), so an upload to an idle server starts within a fraction of a second instead of
after a fresh interpreter's seconds of imports."""

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
from worker.context import RunnerContext, slot_context, worker_name
from worker.local_child import READY
from worker.process import WorkerProcess
from worker.settings import WorkerSettings
from worker.webhooks import WebhookDelivery

log = logging.getLogger("onnx_reducer.worker")
_STOP = ""
POLL_S = 1.0


class LocalRunner:
    def __init__(self, ctx: RunnerContext, settings: WorkerSettings | None = None, jobs_in_child: bool = False) -> None:
        self.ctx = ctx
        self.settings = settings or WorkerSettings()
        self.jobs: queue.Queue[str] = queue.Queue()
        slots = self.settings.local_workers
        ctx.wake = self
        # Each slot claims checks under its own name (the worker row the farm shows), from its own
        # copy of the context: with one shared name, GET /v1/workers and a job's checks_in_flight
        # named a worker that matched neither slot, and each slot showed the job's first check. The
        # copy owns its own process state (``slot_context``): one slot's preparations are not another's.
        names = [_slot_name(i, slots) for i in range(slots)]
        self.nodes = [
            WorkerProcess(self.settings, slot_context(ctx, name), QUEUES, name=name, gpu_queue_needs_gpu=True)
            for name in names
        ]
        self.node = self.nodes[0]
        self.threads = [
            threading.Thread(target=self._loop, args=(node,), name=f"local-runner-{i + 1}", daemon=True)
            for i, node in enumerate(self.nodes)
        ]
        self.children: dict[str, subprocess.Popen[str]] = {}
        self.spares: dict[str, subprocess.Popen[str]] = {}  # per slot: a job process started ahead
        self.jobs_in_child = jobs_in_child
        self._stopping = threading.Event()
        self.webhooks = WebhookDelivery(ctx.db, self.settings)  # this server's deliveries (worker.webhooks)
        if jobs_in_child:
            for node in self.nodes:
                node.run_elsewhere = self._run_in_child

    def __call__(self, job_id: str, queue: str) -> None:
        """The api's ``Enqueue`` (and the slots' wake-up): every queue runs here in embedded mode."""
        self.jobs.put(job_id)

    def start(self) -> LocalRunner:
        mark_owner()
        kill_orphaned_checks()
        for thread in self.threads:
            thread.start()
        for node in self.nodes:
            node.start(poll=False, watch_cancels=False)  # each slot looks for work itself (_loop)
        self.webhooks.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        for _ in self.threads:
            self.jobs.put(_STOP)
        for child in list(self.children.values()) + list(self.spares.values()):
            if child.poll() is None:
                child.terminate()  # its checks' leases expire; the next start resumes the job
        for thread in self.threads:
            thread.join(timeout)
        for node in self.nodes:
            node.stop()
        self.webhooks.stop()
        self.ctx.db.dispose()

    def _run_in_child(self, job_id: str, ctx: RunnerContext) -> ClaimResult:
        """``run_job`` in ``python -m worker.local_child``: the slot's spare (started ahead), given
        the job id and the settings on its stdin; then the next spare is started."""
        slot = threading.current_thread().name
        spare = self.spares.pop(slot, None)
        child = spare if spare is not None and spare.poll() is None else self._spawn(ctx.worker)
        self.children[slot] = child
        output, _ = child.communicate(job_id + "\n")  # its settings went when it was started
        if not self._stopping.is_set():
            self.spares[slot] = self._spawn(ctx.worker)  # its imports run while the slot is idle
        lines = [line for line in output.strip().splitlines() if line != READY]
        if child.returncode != 0 or not lines:
            raise RuntimeError(f"the job process of {job_id} exited with code {child.returncode}")
        return ClaimResult(lines[-1])

    def _spawn(self, slot_worker: str) -> subprocess.Popen[str]:
        """A job process that imports the worker, is given the settings at once and sets itself up
        (connected, the take's statements ready: ``worker.local_child``), then waits for its job id
        on stdin (this worker's runtime as an argument: the child does not probe it again)."""
        runtime = json.dumps(self.node.identity.capabilities.to_json())
        command = [sys.executable, "-m", "worker.local_child", "-", runtime, slot_worker]  # the slot's name
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdin is not None
        child.stdin.write(self.settings.model_dump_json() + "\n")
        child.stdin.flush()
        return child

    def _loop(self, node: WorkerProcess) -> None:
        if self.jobs_in_child:
            self.spares[threading.current_thread().name] = self._spawn(node.identity.name)
        while not self._stopping.is_set():
            try:
                job_id = self.jobs.get(timeout=POLL_S)
            except queue.Empty:
                job_id = None
            if job_id == _STOP:
                return
            if job_id is None:
                node.look()
                continue
            try:
                node.work(job_id)
            except Exception:
                log.exception("job %s failed in the local runner", job_id)
                time.sleep(0.1)


def _slot_name(index: int, slots: int) -> str:
    return worker_name() if slots == 1 else f"{worker_name()}/slot-{index + 1}"

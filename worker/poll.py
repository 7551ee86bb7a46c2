"""The database is the queue; a message only wakes a worker. ``WorkPoller`` is the rest: while the
worker is idle, a thread looks in the database every ``WORKER_POLL_S`` (``run_job.waiting_job``)
and takes what it finds, so work whose message was lost (an enqueue that failed, a Redis outage, a
worker killed holding one) or that a dead worker left (its leases ran out) is taken all the same.

One worker runs one piece of work at a time: the Celery task (``wake``) and the poll share one
lock. The task waits for it (a Celery worker consumes no further message while its task runs, so
wake-ups go to idle workers); the poll skips its turn while the task runs."""

from __future__ import annotations

import logging
import threading

from worker.run_job import waiting_job
from worker.runner import Delivery, JobHandler

log = logging.getLogger("onnx_reducer.worker")


class WorkPoller:
    def __init__(self, handler: JobHandler, poll_s: float) -> None:
        self.handler, self.poll_s = handler, poll_s
        self._working = threading.Lock()
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._loop, name="worker-poll", daemon=True)

    def wake(self, job_id: str) -> Delivery:
        """A wake-up message for ``job_id``: take work (once the poll's work, if any, is done)."""
        with self._working:
            return self.handler.handle(job_id)

    def poll(self) -> Delivery | None:
        """One look: None when the worker is busy or nothing waits that it may take."""
        if not self._working.acquire(blocking=False):
            return None
        try:
            job_id = waiting_job(self.handler.ctx)
            if job_id is None:
                return None
            log.debug("job %s has work waiting in the database; this idle worker takes it", job_id)
            return self.handler.handle(job_id)
        finally:
            self._working.release()

    def start(self) -> WorkPoller:
        self._thread.start()
        return self

    def stop(self) -> None:
        """No further look (work taken already runs to its end, or to the process's)."""
        self._stop.set()

    def look(self) -> None:
        """``poll``, with a database that cannot be reached logged once per outage."""
        try:
            self.poll()
        except Exception as exc:  # noqa: BLE001 - the database is away: look again later
            if not self._failing:
                log.warning("looking for work failed (%s); looking again later", type(exc).__name__)
            self._failing = True
        else:
            self._failing = False

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.look()

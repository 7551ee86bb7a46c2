"""The lease of one attempt at a job: a heartbeat renews it, and every write checks it."""

from __future__ import annotations

import logging
import threading

from persistence.repositories import JobRepository
from worker.context import RunnerContext

log = logging.getLogger("onnx_reducer.worker")


class Heartbeat:
    """Renews the attempt's lease every third of ``lease_s`` for the whole attempt (setup, checks,
    storing the results), so a slow step never lets the lease run out under a live worker. A renewal
    that finds the job no longer held by this attempt sets ``lost``."""

    def __init__(self, ctx: RunnerContext, job_id: str, attempt: int) -> None:
        self.ctx, self.job_id, self.attempt = ctx, job_id, attempt
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lease-{job_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(max(self.ctx.lease_s / 3, 0.05)):
            try:
                with self.ctx.db.session() as session:
                    held = JobRepository(session).renew_lease(self.job_id, self.ctx.lease_s, self.attempt)
            except Exception:
                log.exception("job %s: renewing the lease failed (retrying)", self.job_id)
                continue
            if not held:
                log.warning("job %s: attempt %d no longer holds the job", self.job_id, self.attempt)
                self.lost.set()
                return

"""A cancel reaches a job while this process prepares it (``worker.prepared.PREPARING``): loading a
big model takes many seconds and checks no cancel flag, so a thread looks every
``CANCEL_LOOK_S`` (a query only while something is being prepared) and ends a cancelled one at
once (cancelled, its checks cancelled). The embedded job process then cleans the job's folder and
exits, freeing the model's memory (``worker.local_child``); a Celery worker keeps going: its
preparation finds the job ended and drops its result (``worker.job_start``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from persistence.enums import JobStatus
from persistence.repositories import JobRepository
from worker.context import RunnerContext
from worker.endings import end_job
from worker.prepared import PREPARING

log = logging.getLogger("onnx_reducer.worker")
CANCEL_LOOK_S = 0.25


def end_cancelled_preparations(ctx: RunnerContext) -> list[str]:
    """End the jobs being prepared here whose cancel was requested; their ids."""
    preparing = PREPARING.jobs()
    if not preparing:
        return []
    with ctx.db.session() as session:
        cancelled = [job_id for job_id in preparing if JobRepository(session).cancel_requested(job_id)]
    for job_id in cancelled:
        if end_job(ctx, job_id, JobStatus.CANCELLED, None, None):
            log.info("job %s cancelled while it was being prepared", job_id)
    return cancelled


def start_cancel_watch(
    ctx: RunnerContext, on_cancelled: Callable[[list[str]], None] | None = None, stop: threading.Event | None = None
) -> threading.Thread:
    """The watching thread (a daemon); ``on_cancelled`` runs after it ended jobs."""
    stopped = stop or threading.Event()

    def watch() -> None:
        while not stopped.wait(CANCEL_LOOK_S):
            try:
                cancelled = end_cancelled_preparations(ctx)
            except Exception as exc:  # noqa: BLE001 - the database is away: look again later
                log.debug("cancel watch: %s", type(exc).__name__)
                continue
            if cancelled and on_cancelled is not None:
                on_cancelled(cancelled)

    thread = threading.Thread(target=watch, name="cancel-watch", daemon=True)
    thread.start()
    return thread

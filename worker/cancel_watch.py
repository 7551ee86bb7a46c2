"""A cancel reaches a job while this process prepares it (``RunnerContext.preparing``): loading a
big model takes many seconds and checks no cancel flag, so the process's scheduler looks every
``CANCEL_LOOK_S`` (a query only while something is being prepared) and ends a cancelled one at
once (cancelled, its checks cancelled); a job ended or deleted meanwhile is seen too. Each such
preparation is stopped (``worker.preparing``: raised in the preparing thread, which removes what
it wrote and is free for other work within a second or two). The embedded job process then cleans
the job's folder and exits, freeing the model's memory (``worker.local_child``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import select

from persistence.enums import JobStatus
from persistence.models import Job
from worker.context import RunnerContext
from worker.stops import end_job

log = logging.getLogger("onnx_reducer.worker")
CANCEL_LOOK_S = 0.25


def end_cancelled_preparations(ctx: RunnerContext) -> list[str]:
    """Stop the preparations of jobs that were cancelled, ended or deleted meanwhile
    (``worker.preparing``), and end the cancelled ones; the ids of those it ended."""
    preparing = ctx.preparing.jobs()
    if not preparing:
        return []
    with ctx.db.session() as session:
        rows = session.execute(select(Job.id, Job.status, Job.cancel_requested).where(Job.id.in_(preparing))).all()
    state = {job_id: (JobStatus(status), bool(cancel)) for job_id, status, cancel in rows}
    cancelled: list[str] = []
    for job_id in preparing:
        status, cancel = state.get(job_id, (None, False))
        if status is not None and status is JobStatus.RUNNING and not cancel:
            continue  # still wanted
        # stopped before it is ended: once it has ended (and maybe been deleted), its preparation
        # makes no folder again
        ctx.preparing.stop(job_id)
        if status is None:
            log.info("job %s deleted while it was being prepared; its preparation stops", job_id)
        elif cancel and status is JobStatus.RUNNING and end_job(ctx, job_id, JobStatus.CANCELLED, None, None):
            log.info("job %s cancelled while it was being prepared", job_id)
            cancelled.append(job_id)
    return cancelled


def cancel_watch(ctx: RunnerContext, on_cancelled: Callable[[list[str]], None] | None = None) -> Callable[[], None]:
    """The watch, as a duty of the process's scheduler (``worker.scheduler``: every
    ``CANCEL_LOOK_S``); ``on_cancelled`` runs after it ended jobs."""

    def look() -> None:
        try:
            cancelled = end_cancelled_preparations(ctx)
        except Exception as exc:  # noqa: BLE001 - the database is away: look again later
            log.debug("cancel watch: %s", type(exc).__name__)
            return
        if cancelled and on_cancelled is not None:
            on_cancelled(cancelled)

    return look

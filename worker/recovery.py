"""Orphaned jobs: running with an expired lease (their worker died) or queued but never handed to a
runner (the enqueue failed). They are handed out again; the claim makes duplicates harmless."""

from __future__ import annotations

import logging
from collections.abc import Callable

from persistence.repositories import JobRepository
from worker.context import RunnerContext

log = logging.getLogger("onnx_reducer.worker")


def requeue_orphans(ctx: RunnerContext, send: Callable[[str, str], None], queued_older_than_s: float | None) -> int:
    with ctx.db.session() as session:
        orphans = [(job.id, job.queue) for job in JobRepository(session).orphans(queued_older_than_s)]
    for job_id, queue in orphans:
        log.info("re-queueing orphaned job %s on %s", job_id, queue)
        send(job_id, queue)
    return len(orphans)

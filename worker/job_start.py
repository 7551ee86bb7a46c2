"""Starting a claimed job (or taking it again after all its workers died): prepare the model in
this process, store its weights, announce the start, queue the job's first checks
(**session starts**: ``jobflow.advance.start``). The process's lease keeper
(``worker.unit_lease``) renews the job's lease while a big model loads; once checks are queued,
the workers that run them keep the job alive. A job cancelled, ended or deleted while it is
prepared stops its preparation within a second or two (``worker.cancel_watch``,
``worker.preparing``); a deleted one leaves no folder."""

from __future__ import annotations

import shutil

from sqlalchemy.orm import Session

from jobflow import advance as flow
from jobflow.ending import JobCancelledError, JobTimedOutError
from persistence.enums import ArtifactKind, EventKind, JobTask
from persistence.events import record_event
from persistence.jsonlog import bind_job
from persistence.models import Job, utcnow
from persistence.repositories import ArtifactRepository, JobRepository
from persistence.repositories.units import UnitRepository
from persistence.retry import attempts
from persistence.store import StoredBlob
from worker.advance import Advanced, WorkerSite, announce
from worker.context import RunnerContext
from worker.passes_job import run_passes_job
from worker.prepared import JobInput, prepared_job
from worker.release_job import run_release_job
from worker.stops import deadline_of, ending_errors


def start_job(ctx: RunnerContext, job_id: str) -> None:
    """Run after ``JobRepository.claim`` gave this worker the job."""
    with ctx.db.session() as session:
        job = JobRepository(session).get(job_id)
        if job is None:
            return
        attempt = job.attempts
    lease = ctx.leases.hold_start(job_id, attempt)  # renewed while a big model loads
    try:
        with bind_job(job_id), ending_errors(ctx, job_id):
            _start(ctx, job_id, attempt)
    finally:
        ctx.leases.release(lease)
    with ctx.db.session() as session:
        deleted = JobRepository(session).get(job_id) is None
    if deleted:  # deleted while this worker prepared it: no folder is left of it
        ctx.prepared.drop(job_id)
        shutil.rmtree(ctx.layout.job_dir(job_id), ignore_errors=True)


def _start(ctx: RunnerContext, job_id: str, attempt: int) -> None:
    with ctx.db.session() as session:
        job = JobRepository(session).get(job_id)
        if job is None:
            return
        if job.cancel_requested:
            raise JobCancelledError()
        if utcnow() > deadline_of(job, ctx):
            raise JobTimedOutError(ctx.time_limit_s)
        job_input = JobInput.of(session, job)
    if job_input.task is JobTask.BISECT_RELEASES:  # no reduction session: worker.release_job
        run_release_job(ctx, job_id, attempt)
        return
    if job_input.task is JobTask.BISECT_PASSES:  # no reduction session either: worker.passes_job
        run_passes_job(ctx, job_id, attempt)
        return
    prepared = prepared_job(job_input, ctx)
    nodes = len(prepared.workspace.index)
    weights = {loc: ctx.layout.store.put_file(path) for loc, path in prepared.workspace.sources.files.items()}

    begun: Advanced | None = None
    for run in attempts(ctx.db, f"job {job_id}: starting it"):
        with run as db:
            begun = None  # (a run that was aborted and runs again leaves nothing)
            started = _record_start(db, job_id, attempt, weights, nodes)
            if started is not None:
                job, seq, requeued = started
                begun = flow.start(db, WorkerSite(ctx, prepared), job)
                begun.seq, begun.queued = max(begun.seq, seq), begun.queued + requeued
    if begun is not None:
        announce(ctx, job_id, begun)


def _record_start(
    db: Session, job_id: str, attempt: int, weights: dict[str, StoredBlob], nodes: int
) -> tuple[Job, int, int] | None:
    """The start, under the job's row lock: its weights, its size and its ``started`` event, and
    the checks of workers that died queued again; the job, the event's number and how many were
    queued again (None: it ended meanwhile, or another worker took it again)."""
    job = JobRepository(db).lock_running(job_id)
    if job is None or job.attempts != attempt:
        return None
    for location, blob in weights.items():
        ArtifactRepository(db).put(job_id, ArtifactKind.WEIGHTS, location, blob)
    job.nodes_before = nodes
    started = record_event(
        db, job_id, EventKind.STARTED, {"attempt": attempt, "nodes_before": nodes, "resumed": attempt > 1}
    )
    return job, started, UnitRepository(db).requeue_running(job_id)

"""``run_job``: what a worker does with a message (a Celery task, or the embedded runner's queue).

A message names a job but means "there is work": a job to start, or a check of a running job to
run. The worker takes the work fair share picks (``persistence.fairshare``) until none is left
that it may take: a queued job is started (``worker.job_start``), a queued check unit is run
(``worker.unit_run``); so one job's checks spread over every idle worker of its queue, each
recording its verdict and queueing the next checks itself (``worker.advance``). A job whose
workers all died (its lease ran out, nothing queued) is taken again as a whole and resumes from
its last recorded verdict; a cancelled job nobody runs a check of is ended here.

Returns CLAIMED when this worker did some work, FINISHED when the named job has ended, BUSY
otherwise (others are at it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from checks.capabilities import unmet
from checks.spec import requirements_of
from jobflow.ending import end, record_end
from persistence.enums import EventKind, JobStatus
from persistence.events import CheckStartedPayload, record_event
from persistence.fairshare import fair_order
from persistence.jsonlog import bind_job
from persistence.models import Job, utcnow
from persistence.repositories import ClaimResult, EventRepository, JobRepository
from persistence.repositories.units import UnitRepository, Work
from persistence.retry import transaction
from worker.context import RunnerContext
from worker.job_start import start_job
from worker.unit_run import UnitRun, UnitTicket, cleanup_if_ended

log = logging.getLogger("onnx_reducer.worker")

__all__ = ["run_job"]


@dataclass(frozen=True)
class _Taken:
    job_id: str
    unit: UnitTicket | None  # None: the job itself, to start
    started_seq: int = 0  # the check's ``check_started`` event, announced after the commit


def run_job(job_id: str, ctx: RunnerContext) -> ClaimResult:
    worked = _recover(job_id, ctx)
    while (taken := take_next(ctx)) is not None:
        worked = True
        ctx.on_work(taken.job_id)
        with bind_job(taken.job_id):
            if taken.unit is None:
                start_job(ctx, taken.job_id)
                cleanup_if_ended(ctx, taken.job_id)  # e.g. cancelled while it was prepared (worker.cancel_watch)
            else:
                UnitRun(ctx, taken.unit).run()
    if worked:
        return ClaimResult.CLAIMED
    with ctx.db.session() as session:
        job = JobRepository(session).get(job_id)
        ended = job is None or job.status.terminal
    return ClaimResult.FINISHED if ended else ClaimResult.BUSY


def _recover(job_id: str, ctx: RunnerContext) -> bool:
    """The named job, if nobody works on it (running, its lease out, nothing queued: its workers
    died): taken again and resumed. A job the claim ends (out of attempts) gets its event."""

    def take_over(session: Any) -> ClaimResult | None:
        jobs = JobRepository(session)
        job = jobs.get(job_id)
        if job is None or job.status != JobStatus.RUNNING or _lease_live(job):
            return None
        claim = jobs.claim(job_id, ctx.lease_s, ctx.max_attempts)
        if claim is ClaimResult.FINISHED:
            _announce_end(session, job)
        return claim

    claim = transaction(ctx.db, take_over, f"job {job_id}: taking it over")
    if claim is None:
        return False
    if claim is ClaimResult.FINISHED:
        _notify_last(ctx, job_id)
        cleanup_if_ended(ctx, job_id)
    if claim is not ClaimResult.CLAIMED:
        return False
    log.info("job %s: its workers are gone; this worker takes it again", job_id)
    start_job(ctx, job_id)
    return True


def _lease_live(job: Job) -> bool:
    expires = job.lease_expires_at
    if expires is None:
        return False
    return (expires if expires.tzinfo else expires.replace(tzinfo=utcnow().tzinfo)) >= utcnow()


def take_next(ctx: RunnerContext) -> _Taken | None:
    """Claim the work fair share gives this worker first (a job to start or a check), or None."""
    _end_cancelled(ctx)
    found = transaction(ctx.db, lambda session: _take(ctx, session), "taking the next piece of work")
    if found is None:
        return None
    if found.started_seq:
        ctx.notify(found.job_id, found.started_seq)
    return found


def _take(ctx: RunnerContext, session: Any) -> _Taken | None:
    units = UnitRepository(session)
    work = units.available_work(ctx.queues, ctx.max_attempts)
    if not work:
        return None
    cap = ctx.team_max_running_checks or None
    for item in fair_order(work, units.team_loads(), ctx.team_shares, cap):
        if not _servable(ctx, item):
            continue
        taken = _claim(ctx, session, item)
        if taken is not None:
            return taken
    return None


def _claim(ctx: RunnerContext, session: Any, item: Work) -> _Taken | None:
    if item.kind == "job":
        claimed = JobRepository(session).claim(str(item.id), ctx.lease_s, ctx.max_attempts)
        return _Taken(item.job_id, None) if claimed is ClaimResult.CLAIMED else None
    # inside a savepoint: a unit another worker took first is rolled back, and with it the locks
    # taken for it, so this transaction holds the rows of one job at most (lock order: retry.py)
    savepoint = session.begin_nested()
    taken = _claim_unit(ctx, session, item)
    if taken is None:
        savepoint.rollback()
    else:
        savepoint.commit()
    return taken


def _claim_unit(ctx: RunnerContext, session: Any, item: Work) -> _Taken | None:
    units = UnitRepository(session)
    cap = ctx.team_max_running_checks
    if cap and units.team_running_locked(item.team) >= cap:
        return None
    # the lock order (persistence/retry.py): the job's row before its unit's
    if JobRepository(session).lock_running(item.job_id) is None:
        return None
    if not units.claim(int(item.id), ctx.worker, ctx.lease_s):
        return None
    unit = units.get(int(item.id))
    assert unit is not None
    JobRepository(session).keep_alive(item.job_id, ctx.lease_s)
    payload: CheckStartedPayload = {
        "iteration": unit.number,
        "phase": unit.phase,
        "nodes": unit.node_count,
        "worker": ctx.worker,
        "started_at": (unit.claimed_at or utcnow()).isoformat(),
    }
    seq = record_event(session, item.job_id, EventKind.CHECK_STARTED, payload)
    return _Taken(item.job_id, UnitTicket.of(unit), seq)


def _servable(ctx: RunnerContext, item: Work) -> bool:
    """Whether this worker meets the job's ``requires`` (a worker without capabilities: any job)."""
    if ctx.capabilities is None:
        return True
    return not unmet(requirements_of(item.check_spec), ctx.capabilities)


def _end_cancelled(ctx: RunnerContext) -> None:
    """Cancelled running jobs with no check running: nobody else would end them."""

    def end_all(session: Any) -> list[tuple[str, int]]:
        ended: list[tuple[str, int]] = []
        for job_id in JobRepository(session).cancelled_running(ctx.queues):
            if UnitRepository(session).running_count(job_id):
                continue  # the workers running its checks stop them and end it
            job = JobRepository(session).lock_running(job_id)
            if job is not None:
                ended.append((job_id, end(session, job, JobStatus.CANCELLED)))
        return ended

    for job_id, seq in transaction(ctx.db, end_all, "ending cancelled jobs"):
        ctx.notify(job_id, seq)
        cleanup_if_ended(ctx, job_id)


def _announce_end(session: Any, job: Job) -> None:
    """A job ended by the claim itself (cancelled while queued, out of attempts) gets its event once."""
    if job.finished_at is not None and job.status != JobStatus.SUCCEEDED:
        last = EventRepository(session).after(job.id, job.event_seq - 1)
        if not last or not EventKind(last[-1].kind).terminal:
            record_end(session, job)


def _notify_last(ctx: RunnerContext, job_id: str) -> None:
    with ctx.db.session() as session:
        job = JobRepository(session).get(job_id)
        seq = job.event_seq if job else 0
    ctx.notify(job_id, seq)

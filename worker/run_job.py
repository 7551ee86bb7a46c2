"""``run_job``: what a worker does when woken (a Celery message, its own poll, or the embedded
runner's queue).

The database is the queue; a message names a job but only means "there is work". The worker takes
the work fair share picks (``persistence.fairshare``) until none is left that it may take: a queued
job is started (``worker.job_start``), a queued check unit is run (``worker.unit_run``), a running
job whose workers all died (its lease ran out, nothing queued) is taken again as a whole and
resumes from its last recorded verdict; so one job's checks spread over every idle worker of its
queue, each recording its verdict and queueing the next checks itself (``worker.advance``). While
no other work waits, the worker that records a verdict claims the job's next check in the same
transaction (``worker.claims.claim_follow_up``) and runs it without looking again. A
cancelled job nobody runs a check of is ended here. Idle workers also look every
``WORKER_POLL_S`` (``waiting_job``, ``worker.process``), so a lost message, or a worker that died
holding one, loses no work.

The loop reads: ``take(ctx) -> StartJob | RunCheck | FinishJob`` (claimed in one transaction),
then ``claim.run(ctx)``, which gives the claim to run next when it claimed one itself (a check's
follow-up), else the loop takes again. ``WorkerProcess.work`` runs this loop itself, so a verdict
is stored four calls from the Celery task (``worker.unit_run``); ``run_job`` is the same loop for
the embedded server's job process (``worker.local_child``).

Returns CLAIMED when this worker did some work, FINISHED when the named job has ended, BUSY
otherwise (others are at it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from checks.capabilities import unmet
from checks.requirements import Requirements
from jobflow.ending import end, record_end
from persistence.enums import EventKind, JobStatus
from persistence.fairshare import fair_order
from persistence.jsonlog import bind_job
from persistence.models import Job
from persistence.repositories import ClaimResult, EventRepository, JobRepository
from persistence.repositories.units import FINISH, UnitRepository, Work
from persistence.requirements import stored_requirements
from persistence.retry import transaction
from worker.advance import cleanup_if_ended
from worker.claims import claim_unit
from worker.context import RunnerContext
from worker.finishing import FinishRun, FinishTicket
from worker.job_start import start_job
from worker.unit_run import RunCheck, UnitTicket

log = logging.getLogger("onnx_reducer.worker")

__all__ = ["Claim", "FinishJob", "RunCheck", "StartJob", "nothing_taken", "run_job", "take", "waiting_job"]


@dataclass(frozen=True)
class StartJob:
    """A queued job to start, or a running one whose workers all died, to take again (``resumed``)."""

    job_id: str
    team: str
    queue: str
    attempt: int
    resumed: bool = False

    def run(self, ctx: RunnerContext) -> Claim | None:
        """Start the job (no claim follows)."""
        ctx.on_work(self.job_id)
        with bind_job(self.job_id):
            if self.resumed:
                log.info("job %s: its workers are gone; this worker takes it again", self.job_id)
            log.info(
                "job %s started: team %s, queue %s, attempt %d, worker %s",
                *(self.job_id, self.team, self.queue, self.attempt, ctx.worker),
            )
            start_job(ctx, self.job_id)
            cleanup_if_ended(ctx, self.job_id)  # e.g. cancelled while it was prepared (worker.cancel_watch)
        return None


@dataclass(frozen=True)
class FinishJob:
    """A finishing job's finish unit (``worker.finishing``)."""

    job_id: str
    finish: FinishTicket

    def run(self, ctx: RunnerContext) -> Claim | None:
        """Finish the job (no claim follows)."""
        ctx.on_work(self.job_id)
        with bind_job(self.job_id):
            FinishRun(ctx, self.finish).run()
            cleanup_if_ended(ctx, self.job_id)
        return None


Claim = StartJob | RunCheck | FinishJob


@dataclass
class _Found:
    """What one look at the queue did: the work it claimed and the event that announces it, or a
    job its claim ended (cancelled, or out of attempts, while nobody held it)."""

    taken: Claim | None = None
    seq: int = 0
    ended: str | None = None


def run_job(job_id: str, ctx: RunnerContext) -> ClaimResult:
    """The work loop (module doc), woken for ``job_id``."""
    claim = take(ctx)
    worked = claim is not None
    while claim is not None:
        claim = claim.run(ctx) or take(ctx)
    return ClaimResult.CLAIMED if worked else nothing_taken(job_id, ctx)


def nothing_taken(job_id: str, ctx: RunnerContext) -> ClaimResult:
    """What a wake-up for ``job_id`` that took no work says: FINISHED when the job has ended,
    BUSY otherwise (others are at it; logged when this worker lacks what the job requires)."""
    with ctx.db.session() as session:
        job = JobRepository(session).get(job_id)
        ended = job is None or job.status.terminal
        missing = [] if job is None or ended else _unmet(ctx, stored_requirements(job.requires))
    if missing:
        log.info(
            "job %s needs %s, which this worker (%s) does not offer; it is left for a worker that does",
            *(job_id, ", ".join(missing), ctx.worker),
        )
    return ClaimResult.FINISHED if ended else ClaimResult.BUSY


def waiting_job(ctx: RunnerContext) -> str | None:
    """A job with work this worker may take now (a check, a start, a job to take again, a
    cancelled job to end), or None: what an idle worker asks before it runs ``run_job``."""
    with ctx.db.session() as session:
        for item in UnitRepository(session).available_work(ctx.queues, ctx.max_attempts, limit=50):
            if _servable(ctx, item):
                return item.job_id
        for job_id in JobRepository(session).cancelled_running(ctx.queues):
            if not UnitRepository(session).running_count(job_id):
                return job_id
    return None


def take(ctx: RunnerContext) -> Claim | None:
    """Claim the work fair share gives this worker first (a job to start or a check), or None."""
    while True:
        _end_cancelled(ctx)
        found = transaction(ctx.db, lambda session: _take(ctx, session), "taking the next piece of work")
        if found.ended is None:
            break
        _notify_last(ctx, found.ended)  # a job the claim ended: announced, then look again
        cleanup_if_ended(ctx, found.ended)
    if found.taken is not None and found.seq:
        ctx.notify(found.taken.job_id, found.seq)
    return found.taken


def _take(ctx: RunnerContext, session: Session) -> _Found:
    units = UnitRepository(session)
    work = units.available_work(ctx.queues, ctx.max_attempts)
    cap = ctx.team_max_running_checks or None
    for item in fair_order(work, units.team_loads(), ctx.team_shares, cap) if work else []:
        if not _servable(ctx, item):
            continue
        is_unit = item.kind in ("unit", FINISH)
        found = _claim_in_savepoint(ctx, session, item) if is_unit else _claim_job(ctx, session, item)
        if found is not None:
            return found
    return _Found()


def _claim_job(ctx: RunnerContext, session: Session, item: Work) -> _Found | None:
    """A queued job to start, or a running one nobody holds to take again (or to end: the claim
    ends a cancelled or exhausted one, and this transaction then commits at once)."""
    claim = JobRepository(session).claim(item.job_id, ctx.lease_s, ctx.max_attempts)
    job = session.get(Job, item.job_id, populate_existing=True)
    if job is None or claim is ClaimResult.BUSY:
        return None
    if claim is ClaimResult.FINISHED:
        _announce_end(session, job)
        return _Found(ended=item.job_id)
    return _Found(StartJob(item.job_id, item.team, job.queue, job.attempts, resumed=item.kind == "resume"))


def _claim_in_savepoint(ctx: RunnerContext, session: Session, item: Work) -> _Found | None:
    """A unit, inside a savepoint: one another worker took first is rolled back, and with it the
    locks taken for it, so this transaction holds the rows of one job at most (lock order: retry.py)."""
    savepoint = session.begin_nested()
    found = _claim_unit(ctx, session, item)
    if found is None:
        savepoint.rollback()
    else:
        savepoint.commit()
    return found


def _claim_unit(ctx: RunnerContext, session: Session, item: Work) -> _Found | None:
    claimed = claim_unit(ctx, session, item)
    if claimed is None:
        return None
    unit, seq = claimed
    if item.kind == FINISH:
        return _Found(FinishJob(item.job_id, FinishTicket(unit.id, item.job_id)), seq)
    return _Found(RunCheck(UnitTicket.of(unit)), seq)


def _servable(ctx: RunnerContext, item: Work) -> bool:
    """Whether this worker meets the job's ``requires`` (a worker without capabilities: any job)."""
    return not _unmet(ctx, item.requires)


def _unmet(ctx: RunnerContext, requires: Requirements) -> list[str]:
    return [] if ctx.capabilities is None else unmet(requires, ctx.capabilities)


def _end_cancelled(ctx: RunnerContext) -> None:
    """Cancelled running jobs with no check running: nobody else would end them."""

    def end_all(session: Session) -> list[tuple[str, int]]:
        ended: list[tuple[str, int]] = []
        for job_id in JobRepository(session).cancelled_running(ctx.queues):
            if UnitRepository(session).running_count(job_id):
                continue  # the workers running its checks stop them and end it
            job = JobRepository(session).lock_active(job_id)
            if job is not None:
                ended.append((job_id, end(session, job, JobStatus.CANCELLED)))
        return ended

    for job_id, seq in transaction(ctx.db, end_all, "ending cancelled jobs"):
        ctx.notify(job_id, seq)
        cleanup_if_ended(ctx, job_id)


def _announce_end(session: Session, job: Job) -> None:
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

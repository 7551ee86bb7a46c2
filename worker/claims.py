"""Claiming a check unit for this worker: through fair share (``worker.run_job``), or straight
after recording one of the job's verdicts, in the same transaction, while no other work waits
(``claim_follow_up``: what fair share would pick then, without the queries that pick it).

Either way the job's row is locked before its unit's (the lock order, ``persistence/retry.py``),
the job's lease runs on, and a ``check_started`` event announces the check."""

from __future__ import annotations

from sqlalchemy.orm import Session

from persistence.enums import EventKind
from persistence.events import CheckStartedPayload, record_event
from persistence.models import CheckUnit, Job, utcnow
from persistence.repositories import JobRepository
from persistence.repositories.units import FINISH, UnitRepository, Work
from worker.context import RunnerContext


def claim_unit(ctx: RunnerContext, session: Session, item: Work) -> tuple[CheckUnit, int] | None:
    """The queued unit ``item`` (fair share's pick), claimed, with its event's sequence number
    (0 for a finish unit: it announces no check); None when another worker took it first, its job
    is not running (a finish unit's: not finishing), or its team is at its cap of running checks."""
    units = UnitRepository(session)
    cap = ctx.team_max_running_checks
    if cap and units.team_running_locked(item.team) >= cap:
        return None
    jobs = JobRepository(session)
    finish = item.kind == FINISH
    job = jobs.lock_finishing(item.job_id) if finish else jobs.lock_running(item.job_id)
    unit = units.claim(int(item.id), ctx.worker, ctx.lease_s) if job is not None else None
    if job is None or unit is None:
        return None
    return unit, 0 if finish else _started(ctx, session, job, unit)


def may_follow_up(ctx: RunnerContext, job: Job) -> bool:
    """Whether the worker that records one of ``job``'s verdicts may claim its next check straight
    away (``claim_follow_up``): not for a job being cancelled, nor where a team cap counts checks
    (fair share then decides)."""
    return not job.cancel_requested and not ctx.team_max_running_checks


def claim_follow_up(
    ctx: RunnerContext, session: Session, job: Job, others_waiting: bool
) -> tuple[CheckUnit, int] | None:
    """The row-locked running ``job``'s next queued check, claimed by the worker that has just
    recorded one of its verdicts, when nothing else waits for a worker of its queues (other jobs'
    checks or starts, jobs to take again or to end: ``others_waiting``, read in this transaction
    by ``UnitRepository.survey``) and ``may_follow_up``: then fair share would hand it this very
    check. None otherwise (the worker asks fair share)."""
    if others_waiting or not may_follow_up(ctx, job):
        return None
    with session.no_autoflush:  # the job's pending changes are written once, with the commit
        unit = UnitRepository(session).claim_first(job.id, ctx.worker, ctx.lease_s)
    if unit is None:
        return None
    return unit, _started(ctx, session, job, unit)


def _started(ctx: RunnerContext, session: Session, job: Job, unit: CheckUnit) -> int:
    """The claimed unit's job lives on (its lease runs on); the ``check_started`` event's number."""
    JobRepository.extend_lease(job, ctx.lease_s)
    payload: CheckStartedPayload = {
        "iteration": unit.number,
        "phase": unit.phase,
        "nodes": unit.node_count,
        "worker": ctx.worker,
        "started_at": (unit.claimed_at or utcnow()).isoformat(),
    }
    return record_event(session, job, EventKind.CHECK_STARTED, payload)

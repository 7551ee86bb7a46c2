"""One step of a job's session, the same for a worker's check and a person's answer: the verdict
goes to the session (or, with none, the flow starts and the cache answers what it can), every
verdict the session took in is recorded (``jobflow.recording``) and its state saved, all in the
caller's transaction with the job's row held. What comes next (queue checks, ask a person, end the
job) is the caller's: the step says whether the session failed.

A worker's check unit comes in whole (``deliver_check``, the body of the worker's transaction):
the job's row locked, the unit finished (once: a second delivery of it records nothing), the
verdict taken in and recorded, then the next checks queued, or the job's end planned
(``jobflow.ending.plan_end``), or the job ended when its session failed; a verdict that lands
after the end was planned is recorded as a late iteration (``jobflow.recording.record_late``) and
re-plans nothing. ``start`` is the same without a unit (the worker that starts the job). What only
the worker has (its live sessions, the farm's verdicts, its queue of checks) it lends the step
as a ``Site``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.orm import Session

from engine.session import ReductionSession
from jobflow.ending import end, ending_of, plan_end
from jobflow.recording import CheckRun, record_late, record_taken
from jobflow.stored_state import save_state
from persistence.models import CheckUnit, Job
from persistence.repositories import IterationRepository, JobRepository
from persistence.repositories.units import UnitRepository
from reducer_core.config import SessionConfig
from reducer_core.errors import CheckInfraError, OriginalDidNotFailError
from reducer_core.records import IterationRecord, Localization
from reducer_core.requests import Answer, CheckRequest, Request, SilentListener
from reducer_core.verdict import Verdict

log = logging.getLogger("onnx_reducer.jobflow")


class Collector(SilentListener):
    """The session's listener: the verdicts it took in since the last step, in order."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.records: list[IterationRecord] = []  # checked and cached alike, in order

    def on_record(self, record: IterationRecord) -> None:
        self.records.append(record)

    def on_localization(self, localization: Localization) -> None:
        log.info("job %s: localisation path=%s: %s", self.job_id, localization.path, localization.reason)

    def take(self) -> list[IterationRecord]:
        taken, self.records = self.records, []
        return taken


@dataclass(frozen=True)
class Delivery:
    """A verdict for the session: the request it answers, the answer, and where it came from."""

    request: Request
    answer: Answer
    run: CheckRun = field(default_factory=CheckRun)


@dataclass(frozen=True)
class Step:
    """What a step did: the last event's sequence number (0: none) and the error that ends the
    job (the original passed, the check's infrastructure failed), if any."""

    seq: int
    failure: OriginalDidNotFailError | CheckInfraError | None = None


@dataclass(frozen=True)
class CheckedUnit:
    """A worker's finished check unit, as it hands it in: the unit, its job, the verdict (with the
    model it checked and its output), how long it ran and the job's session options (a late
    verdict is judged with them, ``jobflow.recording.record_late``)."""

    unit_id: int
    job_id: str
    delivery: Delivery
    duration_s: float
    config: SessionConfig


@dataclass
class Advanced:
    """What the caller does after the commit: notify up to ``seq``, announce ``queued`` units on
    ``queue``, run ``follow`` (the job's next check, claimed here for this worker)."""

    seq: int = 0
    queued: int = 0
    ended: bool = False
    finishing: bool = False  # its end is planned: a finish unit queued (``jobflow.ending.plan_end``)
    others_waiting: bool | None = None  # other work for this worker's queues (asked when it may follow up)
    queue: str = ""  # the job's queue
    follow: CheckUnit | None = None  # the job's next check, claimed by this worker in this transaction

    @property
    def goes_on(self) -> bool:
        """The job still runs its checks: neither ended nor finishing."""
        return not self.ended and not self.finishing


class Site(Protocol):
    """The worker's side of a step (``worker.advance.WorkerSite``), in the step's transaction."""

    def open(self, db: Session, job: Job, collector: Collector) -> ReductionSession:
        """The job's session as its stored state is, listened to by ``collector`` (raises the
        error that ends the job when it may not go on: out of time)."""
        ...

    def seed(self, reduction: ReductionSession) -> object:
        """What is known already (the farm's verdicts), given to a session that starts."""
        ...

    def took(self, db: Session, job: Job, delivery: Delivery | None) -> None:
        """After the session took ``delivery`` in (None: none, or it failed): what the worker keeps of it."""
        ...

    def queue_next(self, db: Session, job: Job, reduction: ReductionSession) -> tuple[int, bool | None]:
        """Queue the session's next checks: how many, and whether other work waits (None: not asked)."""
        ...

    def keep(self, db: Session, job: Job, reduction: ReductionSession) -> None:
        """Keep ``reduction`` live for the job's next step once ``db`` commits."""
        ...

    def follow_up(self, db: Session, job: Job, others_waiting: bool) -> tuple[CheckUnit, int] | None:
        """The job's next check, claimed for this worker, with its ``check_started`` event's
        number (None: fair share decides)."""
        ...


def deliver_check(site: Site, checked: CheckedUnit, db: Session) -> Advanced | None:
    """A worker's finished check unit in, in the worker's transaction (module doc); None when the
    job is gone or the unit was recorded, cancelled or taken over already (nothing to announce).
    The verdicts are recorded from here (``jobflow.recording.record_taken``): the Celery task's
    path to the stored verdict is four calls (``worker.unit_run``)."""
    job = JobRepository(db).lock_running(checked.job_id)
    if job is None:
        return _late(db, checked)  # the job's end goes on as planned
    if not UnitRepository(db).finish_open(checked.unit_id, checked.duration_s):
        return None  # the job ended, or another worker recorded this check first
    reduction, records, failure = _take(db, site, job, checked.delivery)
    seq = record_taken(db, job, records, checked.delivery.run)
    advanced = _then(db, site, job, reduction, Step(seq, failure), checked.delivery)
    claimed = site.follow_up(db, job, advanced.others_waiting is not False) if advanced.goes_on else None
    if claimed is not None:
        advanced.follow, advanced.seq = claimed
    return advanced


def start(db: Session, site: Site, job: Job) -> Advanced:
    """The row-locked ``job``'s session starts in the caller's transaction, seeded by ``site``
    (what the caches answer is recorded now), and then its first checks are queued, its end
    planned, or the job ended when its session failed; the state saved once."""
    reduction, records, failure = _take(db, site, job, None)
    seq = record_taken(db, job, records, CheckRun())
    return _then(db, site, job, reduction, Step(seq, failure), None)


def _take(
    db: Session, site: Site, job: Job, delivery: Delivery | None
) -> tuple[ReductionSession, list[IterationRecord], OriginalDidNotFailError | CheckInfraError | None]:
    """The job's session (``site.open``) with ``delivery`` taken in (none: it starts, seeded by
    ``site``): the session, the verdicts it took in (to record), and the error that ends the job."""
    collector = Collector(job.id)
    reduction = site.open(db, job, collector)
    failure = take_in(db, job, reduction, delivery, site.seed if delivery is None else None)
    return reduction, collector.take(), failure


def _then(
    db: Session, site: Site, job: Job, reduction: ReductionSession, taken: Step, delivery: Delivery | None
) -> Advanced:
    """After the verdicts are recorded: the next checks queued, the end planned, or the job ended
    when its session failed; the state saved once."""
    site.took(db, job, delivery if taken.failure is None else None)
    if taken.failure is None and not reduction.done:
        queued, others_waiting = site.queue_next(db, job, reduction)
        save(db, job, reduction)
        site.keep(db, job, reduction)
        return Advanced(taken.seq, queued, others_waiting=others_waiting, queue=job.queue)
    save(db, job, reduction)
    if taken.failure is not None:
        status, code, message = ending_of(taken.failure, job.id)
        return Advanced(end(db, job, status, code, message), ended=True, queue=job.queue)
    seq = plan_end(db, job)  # the finish unit stores and verifies the answer, outside the lock
    site.keep(db, job, reduction)  # for this worker's finish, if it takes it
    return Advanced(seq, queued=1, finishing=True, queue=job.queue)


def _late(db: Session, checked: CheckedUnit) -> Advanced | None:
    """The verdict of a check that landed after its job's end was planned (``finishing``, or
    ended already): recorded as a late iteration, once, re-planning nothing; None when the job
    is gone or this check was recorded already."""
    jobs = JobRepository(db)
    job = jobs.lock_finishing(checked.job_id) or jobs.lock_ended(checked.job_id)
    request, verdict = checked.delivery.request, checked.delivery.answer
    if job is None or not isinstance(request, CheckRequest) or not isinstance(verdict, Verdict):
        return None
    if not UnitRepository(db).finish_late(checked.unit_id, checked.duration_s):
        return None
    run = CheckRun(None, [], checked.delivery.run.output, checked.delivery.run.worker)
    seq = record_late(db, job, request, verdict, run, checked.config)
    return Advanced(seq, ended=job.status.terminal, finishing=not job.status.terminal, queue=job.queue)


def advance(
    db: Session, job: Job, reduction: ReductionSession, collector: Collector, delivery: Delivery | None = None
) -> Step:
    """Deliver ``delivery`` to ``job``'s session (``reduction``, whose listener is ``collector``),
    record what it took in and save its state."""
    failure = take_in(db, job, reduction, delivery)
    seq = record_taken(db, job, collector.take(), delivery.run if delivery is not None else CheckRun())
    save(db, job, reduction)
    return Step(seq, failure)


def take_in(
    db: Session,
    job: Job,
    reduction: ReductionSession,
    delivery: Delivery | None = None,
    seed: Callable[[ReductionSession], object] | None = None,
) -> OriginalDidNotFailError | CheckInfraError | None:
    """Deliver ``delivery`` (none: start the flow, after ``seed`` gave the session what is known
    already, the farm's verdicts, so that what the cache answers is recorded now); returns the
    error that ends the job, if any. The caller records what the session's listener took in
    (``jobflow.recording.record_taken``) and saves the state (``save``) once it has also asked
    for what comes next (the requests in flight are part of the state)."""
    number_from_rows(db, job, reduction)
    try:
        if delivery is not None:
            reduction.deliver(delivery.request, delivery.answer)
        else:
            if seed is not None:
                seed(reduction)
            reduction.next_requests(0)
    except (OriginalDidNotFailError, CheckInfraError) as exc:
        return exc
    return None


def save(db: Session, job: Job, reduction: ReductionSession) -> None:
    """The session's state (``jobflow.stored_state``) and checks count, kept with the job (under
    its row lock), once per step; the state's version is bumped, so a worker keeping the session
    live knows it is current (``worker.live_session``)."""
    save_state(db, job, reduction)
    job.checks_run = reduction.machine.checks_run
    job.state_version = (job.state_version or 0) + 1


def number_from_rows(db: Session, job: Job, reduction: ReductionSession) -> None:
    """A state saved before the machine numbered its records: it goes on after the job's last row."""
    machine = reduction.machine
    if not machine.numbered:
        machine.recorded = IterationRepository(db).next_number(job.id) - 1
        machine.numbered = True

"""One step of a job's session, the same for a worker's check and a person's answer: the verdict
goes to the session (or, with none, the flow starts and the cache answers what it can), every
verdict the session took in is recorded (``jobflow.recording``) and its state saved, all in the
caller's transaction with the job's row held. What comes next (queue checks, ask a person, end the
job) is the caller's: the step says whether the session failed."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from engine.session import ReductionSession
from jobflow.recording import CheckRun, record_cached, record_iteration
from jobflow.stored_state import save_state
from persistence.models import Job
from persistence.repositories import IterationRepository
from reducer_core.errors import CheckInfraError, OriginalDidNotFailError
from reducer_core.records import IterationRecord, Localization
from reducer_core.requests import Answer, Request, SilentListener

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


def advance(
    db: Session, job: Job, reduction: ReductionSession, collector: Collector, delivery: Delivery | None = None
) -> Step:
    """Deliver ``delivery`` to ``job``'s session (``reduction``, whose listener is ``collector``),
    record what it took in and save its state (``take_in``, then ``save``)."""
    step = take_in(db, job, reduction, collector, delivery)
    save(db, job, reduction)
    return step


def take_in(
    db: Session,
    job: Job,
    reduction: ReductionSession,
    collector: Collector,
    delivery: Delivery | None = None,
    seed: Callable[[ReductionSession], object] | None = None,
) -> Step:
    """Deliver ``delivery`` (none: start the flow, after ``seed`` gave the session what is known
    already, the farm's verdicts, so that what the cache answers is recorded now) and record every
    verdict the session took in; the caller saves the state (``save``) once it has also asked for
    what comes next (the requests in flight are part of the state)."""
    number_from_rows(db, job, reduction)
    failure: OriginalDidNotFailError | CheckInfraError | None = None
    try:
        if delivery is not None:
            reduction.deliver(delivery.request, delivery.answer)
        else:
            if seed is not None:
                seed(reduction)
            reduction.next_requests(0)
    except (OriginalDidNotFailError, CheckInfraError) as exc:
        failure = exc
    seq = record(db, job, collector, delivery.run if delivery is not None else CheckRun())
    return Step(seq, failure)


def record(
    db: Session,
    job: Job,
    collector: Collector,
    run: CheckRun = CheckRun(),  # noqa: B008 (frozen: shared safely)
) -> int:
    """Record the verdicts ``collector`` holds (a checked one given by ``run``; a cached one says
    which cache answered it: ``IterationRecord.source``); returns the last event's sequence number
    (0: none)."""
    seq = 0
    for taken in collector.take():
        seq = record_cached(db, job, taken) if taken.cached else record_iteration(db, job, taken, run)
    return seq


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

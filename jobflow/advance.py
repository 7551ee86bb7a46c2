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
from jobflow.recording import FROM_JOB, CheckRun, record_cached, record_iteration
from persistence.models import Job
from reducer_core.errors import CheckInfraError, OriginalDidNotFailError
from reducer_core.records import IterationRecord, Localization
from reducer_core.session import Answer, Request, SilentListener

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
    db: Session,
    job: Job,
    reduction: ReductionSession,
    collector: Collector,
    delivery: Delivery | None = None,
    source_of: Callable[[str], str] = lambda fingerprint: FROM_JOB,
) -> Step:
    """Deliver ``delivery`` to ``job``'s session (``reduction``, whose listener is ``collector``),
    record what it took in and save its state; ``source_of``: which cache answered a candidate."""
    failure: OriginalDidNotFailError | CheckInfraError | None = None
    try:
        if delivery is not None:
            reduction.deliver(delivery.request, delivery.answer)
        else:
            reduction.next_requests(0)  # starts the flow: what the cache answers is recorded now
    except (OriginalDidNotFailError, CheckInfraError) as exc:
        failure = exc
    seq = record(db, job, collector, delivery.run if delivery is not None else CheckRun(), source_of)
    save(job, reduction)
    return Step(seq, failure)


def record(
    db: Session,
    job: Job,
    collector: Collector,
    run: CheckRun = CheckRun(),  # noqa: B008 (frozen: shared safely)
    source_of: Callable[[str], str] = lambda fingerprint: FROM_JOB,
) -> int:
    """Record the verdicts ``collector`` holds (a checked one given by ``run``); returns the last
    event's sequence number (0: none)."""
    seq = 0
    for taken in collector.take():
        if taken.cached:
            seq = record_cached(db, job, taken, source_of(taken.candidate.fingerprint))
        else:
            seq = record_iteration(db, job, taken, run)
    return seq


def save(job: Job, reduction: ReductionSession) -> None:
    """The session's state and checks count, kept with the job (under its row lock)."""
    job.session_state = reduction.state()
    job.checks_run = reduction.machine.checks_run

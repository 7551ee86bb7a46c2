"""Running one claimed check unit: write the candidate from this process's prepared job, run the
check (in its own child process, inside a stop scope that polls the job row, so a cancel or the
time limit stops it within about a second), store the model it checked, then record the verdict
and advance the job's session (``worker.advance``). A lease, renewed while the check runs (``worker.unit_lease``),
keeps the unit this worker's; a worker that dies lets it run out and the unit is queued again
(``UnitRepository.requeue_expired``): the check runs again, and whichever verdict lands first is
the one recorded."""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from checks.cancel import CheckStoppedError, stop_checks_when
from engine.localize import layerwise_run
from jobflow.recording import CheckRun, record_late
from jobflow.units import request_of
from persistence.enums import JobStatus
from persistence.jsonlog import bind_job
from persistence.models import CheckUnit, utcnow
from persistence.repositories import JobRepository
from persistence.repositories.units import UnitRepository
from persistence.retry import transaction
from reducer_core.errors import MissingTypeError
from reducer_core.requests import CheckRequest, Request
from reducer_core.verdict import Verdict, VerdictKind
from worker.advance import Advanced, Delivery, advance, announce, cleanup_if_ended
from worker.claims import claim_follow_up
from worker.context import RunnerContext
from worker.endings import JobTimedOutError, StopPoll, deadline_of, end_if_stopped, ending_errors
from worker.prepared import PREPARED, JobInput, PreparedJob
from worker.unit_lease import LEASES, HeldUnit

log = logging.getLogger("onnx_reducer.worker")
ITERATION_MODEL = "iteration.onnx"
CANCEL_POLL_S = 1.0


@dataclass(frozen=True)
class UnitTicket:
    """A claimed unit, as read when it was claimed."""

    id: int
    job_id: str
    request: Request

    @classmethod
    def of(cls, unit: CheckUnit) -> UnitTicket:
        request = request_of(unit)
        return cls(unit.id, unit.job_id, request)


@dataclass(frozen=True)
class KnownJob:
    """What a unit's run reads from its job's row: a follow-up check of the same job has it already."""

    job: JobInput
    deadline: datetime | None
    polled: float  # when the job was last seen running (``time.monotonic``)


class UnitRun:
    def __init__(self, ctx: RunnerContext, ticket: UnitTicket, known: KnownJob | None = None) -> None:
        self.ctx, self.ticket, self.known = ctx, ticket, known
        self.job_id = ticket.job_id
        self.last_poll = known.polled if known is not None else 0.0
        self.deadline: datetime | None = known.deadline if known is not None else None
        self.lease: HeldUnit | None = None  # its ``lost`` event is set when another worker took the unit

    def run(self, follow: bool = False) -> UnitRun | None:
        """Run the check and record its verdict. With ``follow``, the job's next check is claimed
        in the same transaction when nothing else waits (``worker.claims.claim_follow_up``):
        returned as the run to do next."""
        with bind_job(self.job_id), ending_errors(self.ctx, self.job_id):
            job = self.known.job if self.known is not None else self._read_job()
            checked = self._check(job) if job is not None else None
            if job is None or checked is None:
                return None
            record = functools.partial(self._record, *checked, follow)
            queue, outcome, next_ticket = transaction(self.ctx.db, record, f"job {self.job_id}: recording a verdict")
            if outcome is None:
                cleanup_if_ended(self.ctx, self.job_id)
                return None
            announce(self.ctx, self.job_id, queue, outcome)
            if next_ticket is None:
                return None
            return UnitRun(self.ctx, next_ticket, KnownJob(job, self.deadline, time.monotonic()))

    def _check(self, job: JobInput) -> tuple[PreparedJob, Delivery] | None:
        """Run the check while this worker holds the unit's lease; None when a cancel, the time
        limit or the lost lease stopped it (the job's end is recorded then, where it ended)."""
        prepared = PREPARED.get(job, self.ctx)
        self.lease = LEASES.hold(self.ctx, self.ticket.id, self.job_id)
        poll = StopPoll(self.ctx, self.job_id, JobStatus.RUNNING, self.deadline, CANCEL_POLL_S, self.last_poll)
        poll.lost = self.lease.lost  # another worker took the unit
        try:
            with stop_checks_when(poll):
                return prepared, self._execute(prepared, self.ticket.request)
        except CheckStoppedError:
            end_if_stopped(self.ctx, self.job_id, self.deadline)
            cleanup_if_ended(self.ctx, self.job_id)
            return None
        finally:
            LEASES.release(self.lease)

    def _record_late(self, db: Session, prepared: PreparedJob, delivery: Delivery) -> tuple[str, Advanced] | None:
        """The verdict of a check that landed after its job's end was planned (``finishing``, or
        ended already): recorded as a late iteration, once (``jobflow.recording.record_late``),
        re-planning nothing; None when the job is gone or this check was recorded already."""
        jobs = JobRepository(db)
        job = jobs.lock_finishing(self.job_id) or jobs.lock_ended(self.job_id)
        request, verdict = delivery.request, delivery.answer
        if job is None or not isinstance(request, CheckRequest) or not isinstance(verdict, Verdict):
            return None
        if not UnitRepository(db).finish_late(self.ticket.id, self.duration_s):
            return None
        run = CheckRun(None, [], delivery.output, delivery.worker)
        seq = record_late(db, job, request, verdict, run, prepared.config)
        return job.queue, Advanced(seq, ended=job.status.terminal, finishing=not job.status.terminal)

    def _read_job(self) -> JobInput | None:
        with self.ctx.db.session() as session:
            job = JobRepository(session).get(self.job_id)
            if job is None or job.status != JobStatus.RUNNING:
                return None
            self.deadline = deadline_of(job, self.ctx)
            return JobInput.of(session, job)

    def _execute(self, prepared: PreparedJob, request: Request) -> Delivery:
        worker = self.ctx.worker
        if not isinstance(request, CheckRequest):
            began = time.monotonic()
            result = layerwise_run(prepared.workspace, prepared.spec, prepared.session_check.golden)
            self.duration_s = time.monotonic() - began
            return Delivery(request, result, worker=worker)
        path = prepared.work_dir / ITERATION_MODEL
        try:
            locations = prepared.write(request.candidate, path)
        except MissingTypeError as exc:
            self.duration_s = 0.0
            return Delivery(request, Verdict(VerdictKind.INFRA_ERROR, "", str(exc)), worker=worker)
        blob = self.ctx.layout.store.put_file(path)  # stored first: unreferenced until its verdict
        verdict, output = prepared.check.run(path)
        self.duration_s = verdict.duration_s
        return Delivery(request, verdict, blob, locations, output, worker)

    def _record(
        self, prepared: PreparedJob, delivery: Delivery, follow: bool, session: Session
    ) -> tuple[str, Advanced | None, UnitTicket | None]:
        """Record the verdict and advance the job (in ``transaction``): the job's queue, what the
        caller announces after the commit, and the job's next check when ``follow`` and this
        worker claimed it here."""
        job = JobRepository(session).lock_running(self.job_id)
        if job is None:
            late = self._record_late(session, prepared, delivery)  # the job's end goes on as planned
            return ("", None, None) if late is None else (late[0], late[1], None)
        if not UnitRepository(session).finish_open(self.ticket.id, self.duration_s):
            return "", None, None  # the job ended, or another worker recorded this check first
        if self.deadline is not None and utcnow() > self.deadline:
            raise JobTimedOutError()  # (the unit's finish is rolled back with the transaction)
        advanced = advance(self.ctx, session, job, prepared, delivery, follow)
        waiting = advanced.others_waiting is not False
        claimed = claim_follow_up(self.ctx, session, job, waiting) if follow and advanced.goes_on else None
        if claimed is None:
            return job.queue, advanced, None
        next_unit, advanced.seq = claimed
        return job.queue, advanced, UnitTicket.of(next_unit)

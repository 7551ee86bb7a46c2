"""Running one claimed check unit (``RunCheck``, the work loop's claim): write the candidate from
this process's prepared job, run the check (in its own child process, inside a stop scope that
polls the job row, so a cancel or the time limit stops it within about a second), store the model
it checked, then hand the verdict to ``jobflow.advance.deliver_check`` in one transaction, which
records it and advances the job's session with this worker's side lent (``worker.advance``).

The path from the Celery task to the stored verdict is four calls: ``WorkerProcess.work`` ->
``RunCheck.run`` (its transaction written in place: ``persistence.retry.attempts``) ->
``jobflow.advance.deliver_check`` -> ``jobflow.recording.record_taken``.

A lease, renewed while the check runs (``worker.unit_lease``), keeps the unit this worker's; a
worker that dies lets it run out and the unit is queued again (``UnitRepository.requeue_expired``):
the check runs again, and whichever verdict lands first is the one recorded."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime

from checks.cancel import CheckStoppedError, stop_checks_when
from engine.localize import layerwise_run
from jobflow import advance as flow
from jobflow.advance import Advanced, CheckedUnit, Delivery
from jobflow.recording import CheckRun
from jobflow.units import request_of
from persistence.enums import JobStatus
from persistence.jsonlog import bind_job
from persistence.models import CheckUnit
from persistence.repositories import JobRepository
from persistence.retry import attempts
from reducer_core.errors import MissingTypeError
from reducer_core.requests import CheckRequest, Request
from reducer_core.verdict import Verdict, VerdictKind
from worker.advance import WorkerSite, announce, cleanup_if_ended
from worker.context import RunnerContext
from worker.prepared import JobInput, PreparedJob, prepared_job
from worker.stops import StopPoll, deadline_of, end_if_stopped, ending_errors
from worker.unit_lease import HeldUnit

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


@dataclass(frozen=True)
class RunCheck:
    """A claimed check unit of a running job (the work loop's claim, ``worker.run_job.take``);
    ``known``: its job as the check of the same job before it read it (a follow-up)."""

    unit: UnitTicket
    known: KnownJob | None = None

    @property
    def job_id(self) -> str:
        return self.unit.job_id

    def run(self, ctx: RunnerContext, follow: bool = True) -> RunCheck | None:
        """Run the check, then hand its verdict to ``jobflow`` in one transaction opened here
        (``jobflow.advance.deliver_check``). With ``follow``, the job's next check is claimed in
        that transaction when nothing else waits (``worker.claims.claim_follow_up``): returned,
        the claim to run next."""
        ctx.on_work(self.job_id)  # the farm view shows the job whose check this worker runs
        unit = UnitRun(ctx, self.unit, self.known)
        with bind_job(self.job_id), ending_errors(ctx, self.job_id):
            checked = unit.check()
            if checked is None:
                return None
            prepared, verdict = checked
            site = WorkerSite(ctx, prepared, unit.deadline, follow)
            for attempt in attempts(ctx.db, f"job {self.job_id}: recording a verdict"):
                with attempt as db:
                    outcome = flow.deliver_check(site, verdict, db)
            return unit.after(outcome)
        return None


class UnitRun:
    """One run of a claimed unit's check: the job read (unless known), its prepared model, the
    unit's lease held while the check runs, and what follows the recorded verdict."""

    def __init__(self, ctx: RunnerContext, ticket: UnitTicket, known: KnownJob | None = None) -> None:
        self.ctx, self.ticket, self.known = ctx, ticket, known
        self.job_id = ticket.job_id
        self.last_poll = known.polled if known is not None else 0.0
        self.deadline: datetime | None = known.deadline if known is not None else None
        self.lease: HeldUnit | None = None  # its ``lost`` event is set when another worker took the unit
        self.duration_s = 0.0
        self.job: JobInput | None = known.job if known is not None else None

    def check(self) -> tuple[PreparedJob, CheckedUnit] | None:
        """The job's prepared model and the unit's verdict; None when the job no longer runs, or
        a cancel, the time limit or the lost lease stopped the check (the job's end is recorded
        then, where it ended)."""
        self.job = self.job or self._read_job()
        if self.job is None:
            return None
        prepared = prepared_job(self.job, self.ctx)
        delivery = self._check(prepared)
        if delivery is None:
            return None
        return prepared, CheckedUnit(self.ticket.id, self.job_id, delivery, self.duration_s, prepared.config)

    def after(self, outcome: Advanced | None) -> RunCheck | None:
        """After the commit: announce what the verdict did; the follow-up check claimed with it."""
        if outcome is None:
            cleanup_if_ended(self.ctx, self.job_id)
            return None
        announce(self.ctx, self.job_id, outcome)
        if outcome.follow is None or self.job is None:
            return None
        return RunCheck(UnitTicket.of(outcome.follow), KnownJob(self.job, self.deadline, time.monotonic()))

    def _check(self, prepared: PreparedJob) -> Delivery | None:
        """Run the check while this worker holds the unit's lease (None: stopped, see ``check``)."""
        self.lease = self.ctx.leases.hold(self.ticket.id, self.job_id)
        poll = StopPoll(self.ctx, self.job_id, JobStatus.RUNNING, self.deadline, CANCEL_POLL_S, self.last_poll)
        poll.lost = self.lease.lost  # another worker took the unit
        try:
            with stop_checks_when(poll):
                return self._execute(prepared, self.ticket.request)
        except CheckStoppedError:
            end_if_stopped(self.ctx, self.job_id, self.deadline)
            cleanup_if_ended(self.ctx, self.job_id)
            return None
        finally:
            self.ctx.leases.release(self.lease)

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
            return Delivery(request, result, CheckRun(worker=worker))
        path = prepared.work_dir / ITERATION_MODEL
        try:
            locations = prepared.write(request.candidate, path)
        except MissingTypeError as exc:
            self.duration_s = 0.0
            return Delivery(request, Verdict(VerdictKind.INFRA_ERROR, "", str(exc)), CheckRun(worker=worker))
        blob = self.ctx.layout.store.put_file(path)  # stored first: unreferenced until its verdict
        verdict, output = prepared.check.run(path)
        self.duration_s = verdict.duration_s
        return Delivery(request, verdict, CheckRun(blob, locations, output, worker))

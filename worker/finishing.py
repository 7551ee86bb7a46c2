"""Finishing a job: its finish unit, claimed like a check by any worker once the job's session is
done (``jobflow.ending.plan_end`` made the job ``finishing`` and queued the unit).

The worker holds the unit's lease (``worker.unit_lease``) while it does the slow part outside any
lock and outside any transaction: a reduce job's final models and bug-report bundle are stored
(the bundle's ``repro.py`` self-check runs here) and its answer is checked once more where it must
be (``worker.final_checks``); a precision job's mixed-precision model is written, judged and stored
(``worker.precision_job``). A short transaction then ends the job (``jobflow.ending``), once: the
unit still open, the job still finishing. A cancel, the time limit or the unit's lease lost (a
worker that took the unit after this one stopped renewing it) stops the final checks within about
a second; a worker that dies leaves the unit to run out and be queued again
(``UnitRepository.requeue_expired``). A verdict that lands meanwhile finds no running job and
re-plans nothing."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from checks.cancel import CheckStoppedError, stop_checks_when
from jobflow.advance import Collector
from jobflow.answer import answer_payload
from jobflow.ending import succeed
from persistence.enums import ArtifactKind, JobStatus, JobTask
from persistence.events import AnswerPayload
from persistence.jsonlog import bind_job
from persistence.repositories import ArtifactRepository, JobRepository
from persistence.repositories.units import UnitRepository
from persistence.retry import attempts
from persistence.store import StoredBlob
from worker.context import RunnerContext
from worker.final_checks import Evidence, Finals, check_finals, plan_finals, succeed_verified
from worker.precision_job import precision_payload, store_precision_results, written_fp32_nodes
from worker.prepared import JobInput, PreparedJob, prepared_job
from worker.stops import StopPoll, deadline_of, end_if_stopped, ending_errors
from worker.unit_lease import HeldUnit

log = logging.getLogger("onnx_reducer.worker")
CANCEL_POLL_S = 1.0


@dataclass(frozen=True)
class FinishTicket:
    """A claimed finish unit."""

    id: int
    job_id: str


@dataclass(frozen=True)
class _Read:
    """What the finish reads of the job's row before it prepares the job in this process."""

    job: JobInput
    model_name: str
    deadline: datetime


@dataclass
class PrecisionEnd:
    """A precision job's answer: its stored mixed-precision model and what its end event says."""

    nodes_after: int
    stored: dict[ArtifactKind, tuple[StoredBlob, dict[str, Any]]] = field(default_factory=dict)
    payload: AnswerPayload = field(default_factory=AnswerPayload)


class FinishRun:
    def __init__(self, ctx: RunnerContext, ticket: FinishTicket) -> None:
        self.ctx, self.ticket, self.job_id = ctx, ticket, ticket.job_id
        self.lease: HeldUnit | None = None

    def run(self) -> int:
        """Finish the job; the end event's number (0: it ended otherwise, or the finish stopped)."""
        with bind_job(self.job_id), ending_errors(self.ctx, self.job_id):
            read = self._read()
            if read is None:
                return 0
            began = time.monotonic()
            prepared = prepared_job(read.job, self.ctx)
            self.lease = self.ctx.leases.hold(self.ticket.id, self.job_id)
            poll = StopPoll(self.ctx, self.job_id, JobStatus.FINISHING, read.deadline, CANCEL_POLL_S)
            poll.lost = self.lease.lost  # another worker took the unit
            try:
                with stop_checks_when(poll):
                    answer = self._answer(prepared, read.model_name)
            except CheckStoppedError:
                end_if_stopped(self.ctx, self.job_id, read.deadline)
                return 0
            finally:
                self.ctx.leases.release(self.lease)
            seq = 0
            for attempt in attempts(self.ctx.db, f"job {self.job_id}: ending it"):
                with attempt as db:
                    seq = self._end(db, answer, time.monotonic() - began)
            if seq:
                self.ctx.notify(self.job_id, seq)
            return seq
        return 0

    def _read(self) -> _Read | None:
        with self.ctx.db.session() as db:
            job = JobRepository(db).get(self.job_id)
            if job is None or job.status != JobStatus.FINISHING:
                return None
            return _Read(JobInput.of(db, job), job.model_filename, deadline_of(job, self.ctx))

    def _answer(self, prepared: PreparedJob, model_name: str) -> Finals | PrecisionEnd:
        """The slow part, outside any transaction: the session's result read (the one this
        process kept live, else rebuilt from the stored state: no check runs), then the answer
        stored and verified."""
        with self.ctx.db.session() as db:
            job = JobRepository(db).get(self.job_id)
            if job is None:
                raise CheckStoppedError()
            reduction = self.ctx.live.take(db, prepared, job, Collector(self.job_id))
            result = reduction.result
            evidence = None
            if prepared.task is not JobTask.PRECISION:
                evidence = Evidence.read(db, self.job_id, result, reduction.machine.config.pin_signature)
        if evidence is None:
            allow = prepared.allow_nonfinite
            stored = store_precision_results(self.ctx.layout.store, reduction, result, prepared.work_dir, allow)
            payload = answer_payload(prepared.workspace, result) | precision_payload(reduction, result, allow)
            return PrecisionEnd(written_fp32_nodes(stored), stored, payload)
        finals = plan_finals(self.ctx, self.job_id, model_name, reduction, prepared, evidence)
        check_finals(prepared, finals)
        return finals

    def _end(self, db: Session, answer: Finals | PrecisionEnd, duration_s: float) -> int:
        """The short transaction: the job (still finishing) and its unit (still open) end."""
        job = JobRepository(db).lock_finishing(self.job_id)
        if job is None or not UnitRepository(db).finish_open(self.ticket.id, duration_s):
            return 0  # cancelled, out of time, deleted, or another worker finished it first
        if isinstance(answer, Finals):
            return succeed_verified(db, job, answer)
        for kind, (blob, meta) in answer.stored.items():
            ArtifactRepository(db).put(job.id, kind, kind.value, blob, meta)
        job.nodes_after = job.best_size = answer.nodes_after
        return succeed(db, job, answer.payload)

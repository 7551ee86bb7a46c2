"""Interactive jobs (check spec ``kind: interactive``): a person gives every verdict on the job's
page, as the command line's interactive mode asks on its terminal. Such a job never goes to a
worker (its queue, ``interactive``, has none): the api prepares each check itself, writing the
iteration's model to the artifact store, leaving its iteration row pending and its check unit
*asked* (no worker takes such a unit), and the job shows
``awaiting_verdict`` until someone downloads that model and posts ``fail`` (it reproduces the
failure) or ``pass`` to ``POST /v1/jobs/{id}/verdict``.

A verdict finishes the asked unit and goes, as that unit's request, to the job's
``ReductionSession``, rebuilt from the job's ``session_state`` (as a resumed worker rebuilds it),
through the step a worker's verdict takes (``jobflow.advance``: it is
recorded by ``jobflow.recording`` as a worker's is), and the next check is prepared; when the
session ends, min-bad and min-good are stored as a worker stores them (``jobflow.reduction``)
and the job ends through ``jobflow.ending``.

Each step is one transaction that locks the job's row first (as a cancel or a delete does: the
service's one lock order, ``persistence.retry``), then takes the pending iteration (a conditional
update), so of two posts for the same iteration one wins and the other answers 409, and a step that
fails leaves the check pending for another answer; PostgreSQL aborting it as a conflict runs it
again in place. The model work runs in a thread (at most ``Services.interactive_steps`` of an
app at once), never on the event loop."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from datetime import UTC

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.problems import ProblemError
from api.services import Services
from checks.interactive import InteractiveCheck
from engine.session import ReductionSession, SessionCheck
from engine.workspace import ReduceOptions, Workspace, load_workspace
from jobflow import advance as flow
from jobflow.answer import answer_payload
from jobflow.ending import end, succeed
from jobflow.recording import CheckRun, record_taken
from jobflow.reduction import NOT_RECHECKED, judged_blobs, store_final_models
from jobflow.stored_state import load_state
from jobflow.units import new_unit, request_of
from persistence.enums import ArtifactKind, ErrorCode, EventKind, JobStatus
from persistence.events import VerdictNeededPayload, record_event
from persistence.models import CheckUnit, Job, utcnow
from persistence.options import JobOptions
from persistence.repositories import ArtifactRepository, IterationRepository, JobRepository
from persistence.repositories.units import ASKED, UnitRepository
from persistence.retry import transaction
from reducer_core.errors import OriginalDidNotFailError, ReducerError
from reducer_core.requests import CheckRequest
from reducer_core.verdict import Verdict, VerdictKind

log = logging.getLogger("onnx_reducer.api")
VERDICTS = {"fail": VerdictKind.FAIL, "pass": VerdictKind.PASS}
ITERATION_MODEL = "iteration.onnx"
ORIGINAL_PASSED = (
    "You answered that the original model passes, so there is nothing to reduce. Start a new job and "
    "answer 'It fails' for the original when it shows the failure."
)


@dataclass(frozen=True)
class Awaited:
    """The check a person is asked about: its iteration row, read in the step's transaction."""

    number: int
    fingerprint: str
    took_s: float  # since the question was asked
    unit: CheckUnit | None  # the check unit asked (None: asked before questions were units)


class _Log:
    def info(self, message: str) -> None:
        log.info(message)

    def warning(self, message: str) -> None:
        log.warning(message)


def iteration_link(job_id: str, number: int) -> str:
    return f"/v1/jobs/{job_id}/artifacts/iteration-{number}"


def start_interactive(services: Services, job_id: str) -> list[int]:
    """Prepare the first check of a new interactive job; the event sequence numbers to announce."""

    def work(session: Session) -> list[int]:
        job = JobRepository(session).lock_running(job_id)  # the job's row first (``persistence.retry``)
        if job is None:
            return []
        with _Step(services, session, job) as step:
            return step.advance()

    with services.interactive_steps:
        return transaction(services.db, work, f"the first check of interactive job {job_id}")


def answer(services: Services, team_id: str, job_id: str, iteration: int, verdict: str) -> list[int]:
    """Deliver ``verdict`` for ``iteration`` and prepare what comes next (in a thread). The step
    locks the job's row before anything else, as a cancel or a delete does (the service's one lock
    order, ``persistence.retry``: team, job, units, iterations), and is run again in place when
    PostgreSQL aborts it as a conflict anyway."""

    def work(session: Session) -> list[int]:
        jobs = JobRepository(session)
        job = jobs.for_team(team_id, job_id)
        if job is None:
            return []  # the route checked the team already; a deleted job is simply gone
        if jobs.lock_running(job.id) is None:  # it ended (a cancel, a delete) before this step began
            status = session.scalar(select(Job.status).where(Job.id == job.id))
            raise _not_awaiting(job.id, JobStatus.CANCELLED if status is None else status)
        awaited = _take(session, job, iteration)
        with _Step(services, session, job) as step:
            return step.deliver(awaited, VERDICTS[verdict])

    with services.interactive_steps:
        return transaction(services.db, work, f"a verdict on interactive job {job_id}")


def _not_awaiting(job_id: str, status: JobStatus) -> ProblemError:
    state = "is being cancelled" if status == JobStatus.RUNNING else f"has ended ({status})"
    return ProblemError(409, "Job not awaiting a verdict", f"Job '{job_id}' {state}; it needs no verdict.")


def _take(session: Session, job: Job, iteration: int) -> Awaited:
    """Take the pending iteration ``iteration`` for this step (the row lock / write lock is held
    until the step commits); 409 when it is not the check awaiting a verdict."""
    taken = IterationRepository(session).take_pending(job.id, iteration)
    session.refresh(job)
    if job.status != JobStatus.RUNNING or job.cancel_requested:
        raise _not_awaiting(job.id, job.status)
    if taken is None:
        pending = IterationRepository(session).pending_of(job.id)
        now = f"it awaits iteration {pending.number}" if pending else "no check awaits a verdict right now"
        raise ProblemError(
            409,
            "Stale verdict",
            f"Iteration {iteration} of job '{job.id}' is not awaiting a verdict (answered already, or not asked "
            f"yet): {now}. Reload the job and answer the iteration it shows.",
        )
    fingerprint, asked = taken
    took = max((utcnow() - (asked if asked.tzinfo else asked.replace(tzinfo=UTC))).total_seconds(), 0.0)
    return Awaited(iteration, fingerprint, took, UnitRepository(session).take_asked(job.id, took))


class _Step:
    """One interactive step on ``job`` inside the caller's transaction: the job's model loaded, its
    session rebuilt from ``session_state``; ``advance`` prepares the next check (or ends the job),
    ``deliver`` first takes a verdict in."""

    def __init__(self, services: Services, session: Session, job: Job) -> None:
        self.services, self.session, self.job = services, session, job
        self.store = services.layout.store
        self.work_dir = services.layout.work_dir(job.id) / "interactive"
        self.collector = flow.Collector(job.id)
        self.events: list[int] = []

    def __enter__(self) -> _Step:
        options = ReduceOptions(
            model=self.services.layout.root / self.job.model_path,
            work_dir=self.work_dir,
            artifact_stem="iter",
            link_weights=True,
        )
        self.workspace: Workspace = load_workspace(options, _Log())
        try:
            check = SessionCheck(InteractiveCheck("the iteration model"))
            config = JobOptions.from_stored(self.job.mode, self.job.options).session_config()
            state = load_state(self.session, self.job)
            self.reduction = ReductionSession.start(self.workspace, check, config, state, self.collector)
        except BaseException:
            self.workspace.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.workspace.close()
        shutil.rmtree(self.work_dir, ignore_errors=True)  # the next step loads the model afresh

    # -- a verdict ------------------------------------------------------------------------------

    def deliver(self, awaited: Awaited, kind: VerdictKind) -> list[int]:
        # the check unit asked of the person; a job asked before questions were units: the session's
        request = request_of(awaited.unit) if awaited.unit is not None else self._request()
        if not isinstance(request, CheckRequest) or request.candidate.fingerprint != awaited.fingerprint:
            raise ProblemError(
                409,
                "Stale verdict",
                f"Iteration {awaited.number} of job '{self.job.id}' is no longer the check its reduction waits "
                "for. Reload the job and answer the iteration it shows.",
            )
        signature = "interactive" if kind is VerdictKind.FAIL else ""
        verdict = Verdict(kind, signature, "answered on the job's page", awaited.took_s)
        delivery = flow.Delivery(request, verdict, CheckRun(asked=awaited.number))
        step = flow.advance(self.session, self.job, self.reduction, self.collector, delivery)
        self._announce(step.seq)
        if isinstance(step.failure, OriginalDidNotFailError):
            code, message = ErrorCode.ORIGINAL_DID_NOT_FAIL, ORIGINAL_PASSED
            return self._end(end(self.session, self.job, JobStatus.FAILED, code, message))
        if step.failure is not None:
            code, message = ErrorCode.CHECK_INFRA_ERROR, str(step.failure)
            return self._end(end(self.session, self.job, JobStatus.FAILED, code, message))
        return self.advance()

    def _request(self) -> CheckRequest | None:
        requests = self.reduction.next_requests(1)
        request = requests[0] if requests else None
        # a session without a spec never localises, so it asks for checks only
        return request if isinstance(request, CheckRequest) else None

    def _announce(self, seq: int) -> None:
        if seq:
            self.events.append(seq)

    def _end(self, seq: int) -> list[int]:
        self._announce(seq)
        return self.events

    # -- the next check, or the end --------------------------------------------------------------

    def advance(self) -> list[int]:
        request = self._request()
        self._announce(
            record_taken(self.session, self.job, self.collector.take(), CheckRun())
        )  # answers from the cache, if any
        flow.save(self.session, self.job, self.reduction)
        if request is None:
            return self._succeed() if self.reduction.done else self.events
        path = self.work_dir / ITERATION_MODEL
        locations = self.reduction.write(request.candidate, path)
        blob = self.store.put_file(path)
        artifacts = ArtifactRepository(self.session)
        for location in locations:  # the weight files the download bundles with the model
            weights = self.store.put_file(self.workspace.sources.files[location])
            artifacts.put(self.job.id, ArtifactKind.WEIGHTS, location, weights)
        row = IterationRepository(self.session).start(
            self.job.id, request.phase, request.candidate.fingerprint, len(request.candidate)
        )
        meta = {"weights": locations, "nodes": len(request.candidate)}
        row.artifact_id = artifacts.put(self.job.id, ArtifactKind.ITERATION, f"iteration-{row.number}", blob, meta).id
        units = UnitRepository(self.session)
        if request.id not in units.active_request_ids(self.job.id):  # asked already (a pending row reused)
            units.add(self.job.id, [new_unit(request)], status=ASKED)  # a check unit a person answers
        payload: VerdictNeededPayload = {
            "iteration": row.number,
            "phase": request.phase,
            "nodes": len(request.candidate),
            "artifact": iteration_link(self.job.id, row.number),
        }
        return self._end(record_event(self.session, self.job.id, EventKind.VERDICT_NEEDED, payload))

    def _succeed(self) -> list[int]:
        result = self.reduction.result
        folder = self.work_dir / "results"
        # the very model the person judged when it is self-contained; otherwise the stored model
        # (weights inline) was not shown to them: "not-rechecked" (a person is not asked again)
        judged = judged_blobs(self.session, self.job.id, result, self.reduction.machine.config.pin_signature)
        for model in store_final_models(self.store, self.workspace, result, folder, judged):
            if model.local is not None:
                model.meta["verified"] = {"status": NOT_RECHECKED, "sha256": model.blob.sha256, "checks": 0}
            ArtifactRepository(self.session).put(self.job.id, model.kind, model.kind.value, model.blob, model.meta)
        shutil.rmtree(folder, ignore_errors=True)
        job = self.job
        job.nodes_after = job.best_size = len(result.min_bad)
        return self._end(succeed(self.session, job, answer_payload(self.workspace, result)))


def fail_to_start(services: Services, job_id: str, error: Exception) -> list[int]:
    """A new interactive job whose first check could not be prepared ends failed, saying why."""
    code = ErrorCode.INVALID_MODEL if isinstance(error, ReducerError) else ErrorCode.INTERNAL
    message = str(error) if isinstance(error, ReducerError) else f"{type(error).__name__}: {error}"

    def work(session: Session) -> list[int]:
        job = JobRepository(session).lock_running(job_id)
        return [] if job is None else [end(session, job, JobStatus.FAILED, code, message)]

    return transaction(services.db, work, f"the end of interactive job {job_id}")

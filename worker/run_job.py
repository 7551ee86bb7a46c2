"""``run_job``: the imperative shell that claims a job, drives its ``ReductionSession`` (the same
session the command line runs: localisation included) and persists every step. Called by the
Celery task and by the embedded local runner alike.

Per check: the iteration row is written *pending* (committed) before the check starts; after the
verdict, one transaction records the verdict, the iteration artifact, the session's state and an
event (the layerwise run of a localised job stores the state too). A crashed attempt therefore
resumes from the last finished check: the session replays its flow against the stored verdicts
without running a check, and the pending row (if any) is reused by the re-run of the check that
was interrupted."""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from checks.cancel import CheckStoppedError, stop_checks_when
from checks.spec import CheckSpec, parse_check_spec
from engine.session import ReductionSession, SessionCheck, SessionHooks
from engine.workspace import ReduceOptions, Workspace, load_workspace
from persistence.enums import ArtifactKind, ErrorCode, EventKind, JobStatus, JobTask
from persistence.jsonlog import bind_job
from persistence.models import Job, utcnow
from persistence.reduction import job_config, store_results
from persistence.repositories import (
    ArtifactRepository,
    ClaimResult,
    EventRepository,
    IterationRepository,
    JobRepository,
)
from persistence.store import StoredBlob
from reducer_core.candidate import Candidate
from reducer_core.errors import (
    CheckInfraError,
    InvalidModelError,
    OriginalDidNotFailError,
    ReducerError,
    UsageError,
)
from reducer_core.localization import LayerwiseResult
from reducer_core.records import IterationRecord, Localization, ReductionResult
from reducer_core.session import CheckRequest, SessionConfig
from reducer_core.verdict import Verdict
from worker.checking import job_check
from worker.context import RunnerContext
from worker.farm_cache import FarmCache
from worker.lease import Heartbeat, LeaseLostError
from worker.precision_job import precision_payload, start_precision, store_precision_results

log = logging.getLogger("onnx_reducer.worker")
ORIGINAL_PASSED_ADVICE = (
    "Check that the job's check spec fails on the uploaded model: for kind compare/golden its tolerance "
    "(atol/rtol) and target, for kind error its match, for op-present its ops/names."
)
ITERATION_MODEL = "iteration.onnx"
CANCEL_POLL_S = 1.0


class JobCancelledError(Exception):
    pass


class JobTimedOutError(Exception):
    pass


def run_job(job_id: str, ctx: RunnerContext) -> ClaimResult:
    """Claim ``job_id`` and run it to its end. BUSY: another worker holds it; retry later."""
    with ctx.db.session() as session:
        claim = JobRepository(session).claim(job_id, ctx.lease_s, ctx.max_attempts)
        job = JobRepository(session).get(job_id)
        if claim is ClaimResult.FINISHED and job is not None:
            _announce_end(session, job)
        attempt, first_start = (job.attempts, job.started_at) if job is not None else (0, None)
    if claim is not ClaimResult.CLAIMED:
        if claim is ClaimResult.FINISHED:
            _notify_last(ctx, job_id)
        return claim
    assert first_start is not None
    with bind_job(job_id):
        JobRun(job_id, ctx, attempt, first_start).execute()
    return ClaimResult.CLAIMED


def _announce_end(session: Any, job: Job) -> None:
    """A job ended by the claim itself (cancelled while queued, out of attempts) gets its event once."""
    if job.finished_at is not None and job.status != JobStatus.SUCCEEDED.value:
        last = EventRepository(session).after(job.id, job.event_seq - 1)
        if not last or not EventKind(last[-1].kind).terminal:
            EventRepository(session).append(job.id, _end_event(JobStatus(job.status)), _end_payload(job))


def _notify_last(ctx: RunnerContext, job_id: str) -> None:
    with ctx.db.session() as session:
        job = JobRepository(session).get(job_id)
        seq = job.event_seq if job else 0
    ctx.notify(job_id, seq)


def _end_event(status: JobStatus) -> EventKind:
    return {
        JobStatus.SUCCEEDED: EventKind.SUCCEEDED,
        JobStatus.CANCELLED: EventKind.CANCELLED,
    }.get(status, EventKind.FAILED)


def _end_payload(job: Job) -> dict[str, Any]:
    return {
        "status": job.status,
        "nodes_before": job.nodes_before,
        "nodes_after": job.nodes_after,
        "checks_run": job.checks_run,
        "error_code": job.error_code,
        "error_message": job.error_message,
    }


class _Log:
    def info(self, message: str) -> None:
        log.info(message)

    def warning(self, message: str) -> None:
        log.warning(message)


@dataclass
class _Pending:
    row_id: int
    blob: StoredBlob
    locations: list[str]


@dataclass(frozen=True)
class _JobInput:
    """What an attempt reads from the job row before it starts."""

    spec_text: str
    config: SessionConfig
    state: dict[str, Any] | None
    model_path: str
    golden: tuple[str, str, str] | None  # (storage key, sha256, format)
    task: JobTask = JobTask.REDUCE


class JobRun(SessionHooks):
    """One attempt at one job (the claim is already held), and the hooks its ``ReductionSession``
    runs with. Every write is conditional on this attempt still holding the job
    (``JobRepository.held``); a heartbeat renews the lease."""

    def __init__(self, job_id: str, ctx: RunnerContext, attempt: int, first_start: datetime) -> None:
        self.job_id = job_id
        self.ctx = ctx
        self.attempt = attempt
        self.store = ctx.layout.store
        self.job_work_dir = ctx.layout.work_dir(job_id)
        self.work_dir = self.job_work_dir / f"attempt-{attempt}"
        self.deadline = _aware(first_start) + timedelta(seconds=ctx.time_limit_s)
        self.last_poll = 0.0
        self.pending: _Pending | None = None
        self.output = ""
        self.ended = False
        self.heartbeat = Heartbeat(ctx, job_id, attempt)
        self.task = JobTask.REDUCE

    def execute(self) -> None:
        self.heartbeat.start()
        try:
            self._execute()
        except LeaseLostError:
            log.warning("job %s: attempt %d lost the job to another worker; it stops here", self.job_id, self.attempt)
        finally:
            self.heartbeat.stop()
            # a job that ended keeps its stored artifacts and loses its scratch; an attempt that
            # lost the job removes only its own folder (the holder's is next to it)
            shutil.rmtree(self.job_work_dir if self.ended else self.work_dir, ignore_errors=True)

    def _execute(self) -> None:
        try:
            result = self._reduce()
        except LeaseLostError:
            raise
        except JobCancelledError:
            self._end(JobStatus.CANCELLED, None, None)
        except JobTimedOutError:
            limit = f"{self.ctx.time_limit_s:g}s"
            message = f"The job ran longer than {limit} (JOB_TIME_LIMIT_S, counted from its first start)."
            self._end(JobStatus.FAILED, ErrorCode.TIME_LIMIT, message)
        except OriginalDidNotFailError as exc:
            self._end(JobStatus.FAILED, ErrorCode.ORIGINAL_DID_NOT_FAIL, f"{exc} {ORIGINAL_PASSED_ADVICE}")
        except InvalidModelError as exc:
            self._end(JobStatus.FAILED, ErrorCode.INVALID_MODEL, str(exc))
        except CheckInfraError as exc:
            advice = (
                " The job keeps its finished checks: once the check's infrastructure works again, "
                f"POST /v1/jobs/{self.job_id}/retry resumes it from its last finished check."
            )
            self._end(JobStatus.FAILED, ErrorCode.CHECK_INFRA_ERROR, str(exc) + advice)
        except (UsageError, ReducerError) as exc:
            self._end(JobStatus.FAILED, ErrorCode.INVALID_CHECK, str(exc))
        except Exception as exc:
            log.exception("job %s failed", self.job_id)
            self._end(JobStatus.FAILED, ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        else:
            self._succeed(result)

    def _held(self, session: Session) -> Job:
        job = JobRepository(session).held(self.job_id, self.attempt)
        if job is None:
            raise LeaseLostError()
        return job

    # -- setup ---------------------------------------------------------------------------------

    def _read_job(self) -> _JobInput:
        with self.ctx.db.session() as session:
            job = self._held(session)
            golden = ArtifactRepository(session).get(self.job_id, ArtifactKind.GOLDEN, "golden")
            return _JobInput(
                spec_text=job.check_spec,
                config=job_config(job.mode, dict(job.options)),
                state=job.session_state,
                model_path=job.model_path,
                golden=(golden.storage_key, golden.sha256, str(golden.meta.get("format", "zip"))) if golden else None,
                task=JobTask.of(job.options),
            )

    def _reduce(self) -> tuple[ReductionResult, Workspace]:
        job = self._read_job()
        self._raise_stop_reason()  # cancelled meanwhile, or out of time already (earlier attempts)
        spec = parse_check_spec(job.spec_text)  # the attempt's only parse: checks get the typed spec
        try:
            with stop_checks_when(self._stop_during_check):
                return self._run_session(job, spec)
        except CheckStoppedError:
            self._raise_stop_reason()
            raise JobCancelledError() from None

    def _run_session(self, job: _JobInput, spec: CheckSpec) -> tuple[ReductionResult, Workspace]:
        options = ReduceOptions(
            model=self.ctx.layout.root / job.model_path,
            work_dir=self.work_dir,
            artifact_stem="iter",
            link_weights=True,  # checks load weights through modelio, which accepts hardlinks
        )
        self.workspace = load_workspace(options, _Log())
        try:
            golden, sha256 = self._place_golden(*job.golden) if job.golden is not None else (None, None)
            self.check = job_check(
                spec, self.work_dir, self.ctx.allow_command, self.ctx.check_memory_limit_bytes, golden
            )
            check = SessionCheck(self.check, spec, golden, sha256)
            self.task = job.task
            self.session: ReductionSession = (
                start_precision(self.workspace, check, job.config.mode, job.state)  # worker/precision_job.py
                if job.task is JobTask.PRECISION
                else ReductionSession.start(self.workspace, check, job.config, job.state)
            )
            self.farm = FarmCache.open(self.ctx, self.job_id, self.attempt, self.session)  # seeds its cache
            self._started_event(len(self.workspace.index))
            return self.session.run(self), self.workspace
        except BaseException:
            self.workspace.close()
            raise

    def _place_golden(self, key: str, sha256: str, fmt: str) -> tuple[Path, str]:
        """The job's golden values beside this attempt's checks, named so that the check reads them
        in their format (``.json``: Polygraphy JSON; otherwise the golden zip): a hardlink of the
        stored blob, or a copy across filesystems."""
        target = self.work_dir / ("golden.json" if fmt == "json" else "golden.golden")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        try:
            os.link(self.store.path(key), target)
        except OSError:
            shutil.copyfile(self.store.path(key), target)
        return target, sha256

    def _started_event(self, nodes: int) -> None:
        attempt = self.attempt
        weights = {loc: self.store.put_file(path) for loc, path in self.workspace.sources.files.items()}
        with self.ctx.db.session() as session:
            job = self._held(session)
            for location, blob in weights.items():
                ArtifactRepository(session).put(self.job_id, ArtifactKind.WEIGHTS, location, blob)
            job.nodes_before = nodes
            event = EventRepository(session).append(
                self.job_id, EventKind.STARTED, {"attempt": attempt, "nodes_before": nodes, "resumed": attempt > 1}
            )
        self.ctx.notify(self.job_id, event.seq)

    # -- the session's hooks -------------------------------------------------------------------

    def write_iteration(self, request: CheckRequest) -> Path:
        """The candidate's model (the fast path), stored, and its iteration row written pending."""
        path = self.work_dir / ITERATION_MODEL
        locations = self.session.write(request.candidate, path)
        blob = self.store.put_file(path)
        with self.ctx.db.session() as session:
            self._held(session)
            row = IterationRepository(session).start(
                self.job_id, request.phase, request.candidate.fingerprint, len(request.candidate)
            )
            self.pending = _Pending(row.id, blob, locations)
        return path

    def run_check(self, request: CheckRequest, model: Path) -> Verdict:
        verdict, self.output = self.check.run(model)
        return verdict

    def on_record(self, record: IterationRecord) -> None:
        """One transaction per verdict: the iteration row, its artifact, the session state, an event."""
        if record.cached:
            self.farm.record_hit(record)
            return
        if self.pending is None:
            return
        pending, self.pending = self.pending, None
        verdict = record.verdict
        with self.ctx.db.session() as session:
            job = self._held(session)
            iterations = IterationRepository(session)
            row = iterations.get(pending.row_id)
            iterations.finish(row, verdict.kind.value, record.reproduces, verdict.signature, verdict.detail)
            row.phase, row.duration_s, row.output_tail = record.phase, verdict.duration_s, self.output[-4000:]
            meta = {"weights": pending.locations, "nodes": len(record.candidate)}
            name = f"iteration-{row.number}"
            row.artifact_id = (
                ArtifactRepository(session).put(self.job_id, ArtifactKind.ITERATION, name, pending.blob, meta).id
            )
            JobRepository.progress(
                job,
                session_state=self.session.state(),
                checks_run=self.session.machine.checks_run,
                iterations_done=row.number,
                best_size=record.best_size,
                check_time_s=job.check_time_s + verdict.duration_s,
            )
            payload = {
                "number": row.number,
                "phase": record.phase,
                "nodes": len(record.candidate),
                "verdict": verdict.kind.value,
                "reproduces": record.reproduces,
                "duration_s": round(verdict.duration_s, 4),
                "best_size": record.best_size,
                "fingerprint": record.candidate.fingerprint,
            }
            event = EventRepository(session).append(self.job_id, EventKind.ITERATION, payload)
        self.ctx.notify(self.job_id, event.seq)
        self.farm.share(record.candidate, verdict)

    def on_layerwise(self, result: LayerwiseResult) -> None:
        """A finished layerwise run is kept (state and count), so a resumed attempt skips it."""
        with self.ctx.db.session() as session:
            job = self._held(session)
            JobRepository.progress(job, session_state=self.session.state(), checks_run=self.session.machine.checks_run)
        self.farm.share_layerwise(result)

    def on_localization(self, localization: Localization) -> None:
        log.info("job %s: localisation path=%s: %s", self.job_id, localization.path, localization.reason)

    def should_stop(self) -> bool:
        """Between checks: a cancelled job, one past its time limit or a lost lease stops here."""
        self._raise_stop_reason()
        return False

    def _stop_during_check(self) -> bool:
        """The stop scope's question while a check runs (the job row at most every CANCEL_POLL_S)."""
        now = time.monotonic()
        if now - self.last_poll < CANCEL_POLL_S:
            return False
        self.last_poll = now
        try:
            self._raise_stop_reason()
        except (JobCancelledError, JobTimedOutError, LeaseLostError):
            return True
        return False

    def _raise_stop_reason(self) -> None:
        if self.heartbeat.lost.is_set():
            raise LeaseLostError()
        if utcnow() > self.deadline:
            raise JobTimedOutError()
        with self.ctx.db.session() as session:
            cancelled = JobRepository(session).cancel_requested(self.job_id)
        if cancelled:
            raise JobCancelledError()

    # -- the end -------------------------------------------------------------------------------

    def _succeed(self, outcome: tuple[ReductionResult, Workspace]) -> None:
        result, workspace = outcome
        precision = self.task is JobTask.PRECISION
        try:
            if precision:
                stored = store_precision_results(self.store, self.session, result, self.work_dir)
            else:
                stored = store_results(self.store, workspace, result, self.work_dir)
        finally:
            workspace.close()
        with self.ctx.db.session() as session:
            job = self._held(session)
            for kind, (blob, meta) in stored.items():
                ArtifactRepository(session).put(self.job_id, kind, kind.value, blob, meta)
            job.nodes_after = len(result.min_bad)
            job.best_size = len(result.min_bad)
            JobRepository(session).finish(job, JobStatus.SUCCEEDED)
            payload = _end_payload(job) | {"min_bad_nodes": _labels(workspace, result.min_bad)}
            if precision:
                payload |= precision_payload(self.session, result)
            if result.localization is not None:
                payload["localization"] = result.localization.to_json()
            event = EventRepository(session).append(self.job_id, EventKind.SUCCEEDED, payload)
        self.ended = True
        self.ctx.notify(self.job_id, event.seq)

    def _end(self, status: JobStatus, code: ErrorCode | None, message: str | None) -> None:
        with self.ctx.db.session() as session:
            job = self._held(session)
            IterationRepository(session).drop_pending(self.job_id)
            JobRepository(session).finish(job, status, code, message)
            event = EventRepository(session).append(self.job_id, _end_event(status), _end_payload(job))
        self.ended = True
        self.ctx.notify(self.job_id, event.seq)


def _labels(workspace: Workspace, candidate: Candidate) -> list[str]:
    return [workspace.index.label(n) for n in sorted(candidate.nodes)][:50]


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes (stored as UTC)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def model_path_of(job: Job, root: Path) -> Path:
    return root / job.model_path

"""``run_job``: the imperative shell that claims a job, runs the engine's reduction loop on it and
persists every step. Called by the Celery task and by the embedded local runner alike.

Per check: the iteration row is written *pending* (committed) before the check starts; after the
verdict, one transaction records the verdict, the iteration artifact, the strategy state, the
verdict cache and an event. A crashed attempt therefore resumes from the last finished check:
the strategy replays its observations, the cache answers every finished check, and the pending
row (if any) is reused by the re-run of the check that was interrupted."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checks.spec import CheckSpec, parse_check_spec
from engine.workspace import ReduceOptions, Workspace, load_workspace
from persistence.enums import ArtifactKind, ErrorCode, EventKind, JobStatus
from persistence.models import Job
from persistence.repositories import (
    ArtifactRepository,
    ClaimResult,
    EventRepository,
    IterationRepository,
    JobRepository,
)
from persistence.store import StoredBlob
from reducer_core import modelio
from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.errors import (
    CheckInfraError,
    InvalidModelError,
    MissingTypeError,
    OriginalDidNotFailError,
    ReducerError,
    UsageError,
)
from reducer_core.reducer import IterationRecord, Reduction, ReductionResult
from reducer_core.strategies import SearchSpace, Strategy
from reducer_core.verdict import Verdict, VerdictKind
from worker.check_process import CheckStoppedError, run_stoppable
from worker.context import RunnerContext
from worker.results import store_results

log = logging.getLogger("onnx_reducer.worker")
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
    if claim is not ClaimResult.CLAIMED:
        if claim is ClaimResult.FINISHED:
            _notify_last(ctx, job_id)
        return claim
    JobRun(job_id, ctx).execute()
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


class JobRun:
    """One attempt at one job (the claim is already held)."""

    def __init__(self, job_id: str, ctx: RunnerContext) -> None:
        self.job_id = job_id
        self.ctx = ctx
        self.store = ctx.layout.store
        self.work_dir = ctx.layout.work_dir(job_id)
        self.started = time.monotonic()
        self.last_poll = 0.0
        self.pending: _Pending | None = None
        self.output = ""

    def execute(self) -> None:
        try:
            result = self._reduce()
        except JobCancelledError:
            self._end(JobStatus.CANCELLED, None, None)
        except JobTimedOutError:
            self._end(JobStatus.FAILED, ErrorCode.TIME_LIMIT, f"The job ran longer than {self.ctx.time_limit_s:g}s.")
        except OriginalDidNotFailError as exc:
            self._end(JobStatus.FAILED, ErrorCode.ORIGINAL_DID_NOT_FAIL, str(exc))
        except InvalidModelError as exc:
            self._end(JobStatus.FAILED, ErrorCode.INVALID_MODEL, str(exc))
        except CheckInfraError as exc:
            self._end(JobStatus.FAILED, ErrorCode.CHECK_INFRA_ERROR, str(exc))
        except (UsageError, ReducerError) as exc:
            self._end(JobStatus.FAILED, ErrorCode.INVALID_CHECK, str(exc))
        except Exception as exc:
            log.exception("job %s failed", self.job_id)
            self._end(JobStatus.FAILED, ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        else:
            self._succeed(result)

    # -- setup ---------------------------------------------------------------------------------

    def _reduce(self) -> tuple[ReductionResult, Workspace]:
        with self.ctx.db.session() as session:
            job = JobRepository(session).get(self.job_id)
            assert job is not None
            self.spec_text, mode, options = job.check_spec, job.mode, dict(job.options)
            state, cached, model_path, attempt = job.strategy_state, job.verdict_cache, job.model_path, job.attempts
        self.spec: CheckSpec = parse_check_spec(self.spec_text)
        self.workspace = load_workspace(
            ReduceOptions(model=self.ctx.layout.root / model_path, work_dir=self.work_dir, artifact_stem="iter"),
            _Log(),
        )
        index = self.workspace.index
        space = SearchSpace(
            index,
            index.all_nodes(),
            bool(options.get("reduce_inputs", True)),
            bool(options.get("reduce_outputs", True)),
        )
        self.strategy = Strategy.from_state(space, state) if state else Strategy(space, mode)
        self.cache = VerdictCache(index.fingerprint, self.spec.identity)
        if cached:
            self.cache.merge_json(cached)
        self._started_event(len(index), attempt)
        reduction = Reduction(
            self.strategy,
            self.oracle,
            self.cache,
            bool(options.get("pin_signature", True)),
            self.on_iteration,
            self.should_stop,
        )
        try:
            return reduction.run(), self.workspace
        except BaseException:
            self.workspace.close()
            raise

    def _started_event(self, nodes: int, attempt: int) -> None:
        weights = {loc: self.store.put_file(path) for loc, path in self.workspace.sources.files.items()}
        with self.ctx.db.session() as session:
            job = JobRepository(session).get(self.job_id)
            assert job is not None
            for location, blob in weights.items():
                ArtifactRepository(session).put(self.job_id, ArtifactKind.WEIGHTS, location, blob)
            job.nodes_before = nodes
            event = EventRepository(session).append(
                self.job_id, EventKind.STARTED, {"attempt": attempt, "nodes_before": nodes, "resumed": attempt > 1}
            )
        self.ctx.notify(self.job_id, event.seq)

    # -- the loop's callbacks ------------------------------------------------------------------

    def oracle(self, candidate: Candidate, iteration: int) -> Verdict:
        path = self.work_dir / ITERATION_MODEL
        try:
            model = self.workspace.model_for(candidate)
        except MissingTypeError as exc:
            return Verdict(VerdictKind.INFRA_ERROR, "", str(exc))
        modelio.write_iteration_model(model, path, self.workspace.sources)
        blob = self.store.put_file(path)
        phase = "original" if candidate.nodes == self.strategy.space.start and not self.cache else self.strategy.phase
        with self.ctx.db.session() as session:
            row = IterationRepository(session).start(self.job_id, phase, candidate.fingerprint, len(candidate))
            JobRepository(session).renew_lease(self.job_id, self.ctx.lease_s)
            self.pending = _Pending(row.id, blob, sorted(modelio.referenced_locations(model)))
        try:
            verdict, self.output = run_stoppable(
                self.spec_text, path, self.ctx.allow_command, self._stop_during_check, self.work_dir
            )
        except CheckStoppedError:
            self._raise_stop_reason()
            raise
        return verdict

    def on_iteration(self, record: IterationRecord) -> None:
        if record.cached or self.pending is None:
            return
        pending, self.pending = self.pending, None
        verdict = record.verdict
        with self.ctx.db.session() as session:
            iterations = IterationRepository(session)
            row = iterations.get(pending.row_id)
            iterations.finish(row, verdict.kind.value, record.reproduces, verdict.signature, verdict.detail)
            row.phase, row.duration_s, row.output_tail = record.phase, verdict.duration_s, self.output[-4000:]
            meta = {"weights": pending.locations, "nodes": len(record.candidate)}
            name = f"iteration-{row.number}"
            row.artifact_id = (
                ArtifactRepository(session).put(self.job_id, ArtifactKind.ITERATION, name, pending.blob, meta).id
            )
            job = JobRepository(session).get(self.job_id)
            assert job is not None
            JobRepository.progress(
                job,
                strategy_state=self.strategy.state(),
                verdict_cache=self.cache.to_json(),
                checks_run=job.checks_run + 1,
                iterations_done=row.number,
                best_size=record.best_size,
                check_time_s=job.check_time_s + verdict.duration_s,
            )
            JobRepository(session).renew_lease(self.job_id, self.ctx.lease_s)
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

    def should_stop(self) -> bool:
        """Between checks: a cancelled job or one past its time limit stops here."""
        self._raise_stop_reason(force=True)
        return False

    def _stop_during_check(self) -> bool:
        now = time.monotonic()
        if now - self.last_poll < CANCEL_POLL_S:
            return False
        self.last_poll = now
        try:
            self._raise_stop_reason(force=True)
        except (JobCancelledError, JobTimedOutError):
            return True
        return False

    def _raise_stop_reason(self, force: bool = True) -> None:
        if time.monotonic() - self.started > self.ctx.time_limit_s:
            raise JobTimedOutError()
        with self.ctx.db.session() as session:
            jobs = JobRepository(session)
            cancelled = jobs.cancel_requested(self.job_id)
            if not cancelled:
                jobs.renew_lease(self.job_id, self.ctx.lease_s)
        if cancelled:
            raise JobCancelledError()

    # -- the end -------------------------------------------------------------------------------

    def _succeed(self, outcome: tuple[ReductionResult, Workspace]) -> None:
        result, workspace = outcome
        try:
            stored = store_results(self.store, workspace, result, self.work_dir)
        finally:
            workspace.close()
        with self.ctx.db.session() as session:
            for kind, (blob, meta) in stored.items():
                ArtifactRepository(session).put(self.job_id, kind, kind.value, blob, meta)
            job = JobRepository(session).get(self.job_id)
            assert job is not None
            job.nodes_after = len(result.min_bad)
            job.best_size = len(result.min_bad)
            JobRepository(session).finish(job, JobStatus.SUCCEEDED)
            payload = _end_payload(job) | {"min_bad_nodes": _labels(workspace, result.min_bad)}
            event = EventRepository(session).append(self.job_id, EventKind.SUCCEEDED, payload)
        self.ctx.notify(self.job_id, event.seq)

    def _end(self, status: JobStatus, code: ErrorCode | None, message: str | None) -> None:
        with self.ctx.db.session() as session:
            IterationRepository(session).drop_pending(self.job_id)
            job = JobRepository(session).get(self.job_id)
            assert job is not None
            JobRepository(session).finish(job, status, code, message)
            event = EventRepository(session).append(self.job_id, _end_event(status), _end_payload(job))
        self.ctx.notify(self.job_id, event.seq)


def _labels(workspace: Workspace, candidate: Candidate) -> list[str]:
    return [workspace.index.label(n) for n in sorted(candidate.nodes)][:50]


def model_path_of(job: Job, root: Path) -> Path:
    return root / job.model_path

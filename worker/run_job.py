"""``run_job``: the imperative shell that claims a job, runs the engine's reduction loop on it and
persists every step. Called by the Celery task and by the embedded local runner alike.

Per check: the iteration row is written *pending* (committed) before the check starts; after the
verdict, one transaction records the verdict, the iteration artifact, the strategy state, the
verdict cache and an event. A crashed attempt therefore resumes from the last finished check:
the strategy replays its observations, the cache answers every finished check, and the pending
row (if any) is reused by the re-run of the check that was interrupted."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from checks.spec import CheckSpec, parse_check_spec
from engine.workspace import ReduceOptions, Workspace, load_workspace
from persistence.enums import ArtifactKind, ErrorCode, EventKind, JobStatus
from persistence.jsonlog import bind_job
from persistence.models import Job, utcnow
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


class LeaseLostError(Exception):
    """This attempt no longer holds the job (its lease ran out and another worker claimed it, or
    the job ended): it stops at once and writes nothing more."""


class _Heartbeat:
    """Renews the attempt's lease every third of ``lease_s`` for the whole attempt (setup, checks,
    storing the results), so a slow step never lets the lease run out under a live worker. A renewal
    that finds the job no longer held by this attempt sets ``lost``."""

    def __init__(self, ctx: RunnerContext, job_id: str, attempt: int) -> None:
        self.ctx, self.job_id, self.attempt = ctx, job_id, attempt
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lease-{job_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(max(self.ctx.lease_s / 3, 0.05)):
            try:
                with self.ctx.db.session() as session:
                    held = JobRepository(session).renew_lease(self.job_id, self.ctx.lease_s, self.attempt)
            except Exception:
                log.exception("job %s: renewing the lease failed (retrying)", self.job_id)
                continue
            if not held:
                log.warning("job %s: attempt %d no longer holds the job", self.job_id, self.attempt)
                self.lost.set()
                return


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


class JobRun:
    """One attempt at one job (the claim is already held). Every write is conditional on this
    attempt still holding the job (``JobRepository.held``); a heartbeat renews the lease."""

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
        self.heartbeat = _Heartbeat(ctx, job_id, attempt)
        self.golden: Path | None = None
        self.golden_identity = ""

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
            self._end(JobStatus.FAILED, ErrorCode.ORIGINAL_DID_NOT_FAIL, str(exc))
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

    def _reduce(self) -> tuple[ReductionResult, Workspace]:
        with self.ctx.db.session() as session:
            job = self._held(session)
            self.spec_text, mode, options = job.check_spec, job.mode, dict(job.options)
            state, cached, model_path = job.strategy_state, job.verdict_cache, job.model_path
            golden = ArtifactRepository(session).get(self.job_id, ArtifactKind.GOLDEN, "golden")
            golden_source = (
                (golden.storage_key, golden.sha256, str(golden.meta.get("format", "zip"))) if golden else None
            )
        self._raise_stop_reason()  # cancelled meanwhile, or out of time already (earlier attempts)
        self.spec: CheckSpec = parse_check_spec(self.spec_text)
        self.workspace = load_workspace(
            ReduceOptions(
                model=self.ctx.layout.root / model_path,
                work_dir=self.work_dir,
                artifact_stem="iter",
                link_weights=True,  # checks load weights through modelio, which accepts hardlinks
            ),
            _Log(),
        )
        try:
            if golden_source is not None:
                self._place_golden(*golden_source)
            index = self.workspace.index
            space = SearchSpace(
                index,
                index.all_nodes(),
                bool(options.get("reduce_inputs", True)),
                bool(options.get("reduce_outputs", True)),
            )
            self.strategy = Strategy.from_state(space, state) if state else Strategy(space, mode)
            identity = f"{self.spec.identity}{self.golden_identity} | {self.workspace.options.identity}"
            self.cache = VerdictCache(index.fingerprint, identity)
            if cached:
                self.cache.merge_json(cached)
            self._started_event(len(index))
            reduction = Reduction(
                self.strategy,
                self.oracle,
                self.cache,
                bool(options.get("pin_signature", True)),
                self.on_iteration,
                self.should_stop,
            )
            return reduction.run(), self.workspace
        except BaseException:
            self.workspace.close()
            raise

    def _place_golden(self, key: str, sha256: str, fmt: str) -> None:
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
        self.golden, self.golden_identity = target, f" golden=sha256:{sha256}"

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
            self._held(session)
            row = IterationRepository(session).start(self.job_id, phase, candidate.fingerprint, len(candidate))
            self.pending = _Pending(row.id, blob, sorted(modelio.referenced_locations(model)))
        try:
            verdict, self.output = run_stoppable(
                self.spec_text,
                path,
                self.ctx.allow_command,
                self._stop_during_check,
                self.work_dir,
                self.ctx.check_memory_limit_bytes,
                self.golden,
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
                strategy_state=self.strategy.state(),
                verdict_cache=self.cache.to_json(),
                checks_run=job.checks_run + 1,
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

    def should_stop(self) -> bool:
        """Between checks: a cancelled job, one past its time limit or a lost lease stops here."""
        self._raise_stop_reason()
        return False

    def _stop_during_check(self) -> bool:
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
        try:
            stored = store_results(self.store, workspace, result, self.work_dir)
        finally:
            workspace.close()
        with self.ctx.db.session() as session:
            job = self._held(session)
            for kind, (blob, meta) in stored.items():
                ArtifactRepository(session).put(self.job_id, kind, kind.value, blob, meta)
            job.nodes_after = len(result.min_bad)
            job.best_size = len(result.min_bad)
            job.cache_hits = result.cache_hits
            JobRepository(session).finish(job, JobStatus.SUCCEEDED)
            payload = _end_payload(job) | {"min_bad_nodes": _labels(workspace, result.min_bad)}
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

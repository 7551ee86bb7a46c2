"""The end of a reduce job: its answer verified before it succeeds (``reducer_core.verification``).

When the session is done, ``plan_finals`` (under the job's row lock) stores min-bad and min-good:
the very model a check of this job judged when that model is self-contained (``judged``: no copy,
no extra check), else a self-contained model that must be checked once more as written. It also
asks for one check of a trivial model when every verdict of the job reproduced the original
failure (the check may not depend on the model). With nothing left to check the job succeeds at
once (``succeed_verified``); otherwise the worker commits, runs those checks itself outside the lock
(``run_finals``: the job's lease renewed, a cancel or the time limit stops them), then ends the
job: ``succeeded`` (with ``suspect`` in the min-bad artifact's meta when the trivial model failed
like the original) or, when a final check disagreed, ``failed`` with ``unverified-result``.

A verdict from the farm's cache was given by another job's check to a candidate of the same
fingerprint (graph, node set, check and options); the farm keeps no bytes, so the final model of
such a candidate is checked once more."""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from checks.cancel import CheckStoppedError, stop_checks_when
from engine.report_bundle import NoBundle, store_bundle
from engine.session import ReductionSession
from jobflow.ending import end, succeed
from persistence.enums import ArtifactKind, ErrorCode, JobStatus
from persistence.events import AnswerPayload
from persistence.models import Job, utcnow
from persistence.reduction import FinalModel, judged_blobs, store_final_models
from persistence.repositories import ArtifactRepository, IterationRepository, JobRepository
from persistence.store import StoredBlob
from reducer_core.verdict import Pinning, Verdict, VerdictKind
from reducer_core.verification import (
    DISAGREES,
    MIN_BAD,
    MIN_GOOD,
    RECHECKED,
    Suspect,
    Verified,
    agrees,
    checker_crash,
    disagreement,
    identity_model,
)
from worker.context import RunnerContext
from worker.endings import deadline_of, end_job, time_limit_message
from worker.lease import Heartbeat
from worker.prepared import PreparedJob

log = logging.getLogger("onnx_reducer.worker")
FINAL_MODEL = "final.onnx"
CANCEL_POLL_S = 1.0
_WHICH = {ArtifactKind.MIN_BAD: MIN_BAD, ArtifactKind.MIN_GOOD: MIN_GOOD}


@dataclass
class Finals:
    """What ends a reduce job: its final models, whether a trivial model is checked, and what the
    end event says."""

    job_id: str
    attempt: int
    models: list[FinalModel]
    original: Verdict
    pinning: bool | Pinning
    preflight: bool
    original_output: str
    nodes_after: int
    payload: AnswerPayload = field(default_factory=AnswerPayload)
    suspect: Suspect | None = None
    repeats: int = 1  # runs a min-bad gets to reproduce the failure (a check known to be flaky: more)
    extra: dict[ArtifactKind, tuple[StoredBlob, dict[str, Any]]] = field(default_factory=dict)  # the bundle

    @property
    def complete(self) -> bool:
        return not self.preflight and all(m.local is None for m in self.models)


def plan_finals(
    ctx: RunnerContext, session: Any, job: Job, reduction: ReductionSession, prepared: PreparedJob
) -> Finals:
    """Store the final models (``judged`` ones reuse the model a check judged) and say which
    checks remain (under the job's row lock)."""
    result = reduction.result
    iterations = IterationRepository(session)
    pinning = reduction.machine.config.pin_signature
    judged = judged_blobs(session, job.id, result, pinning)
    models = store_final_models(ctx.layout.store, prepared.workspace, result, prepared.work_dir, judged)
    bundle = store_bundle(
        ctx.layout.store,
        prepared.workspace,
        result,
        prepared.spec,
        prepared.session_check.golden,
        prepared.work_dir,
        job.model_filename,
        ctx.worker,
        # the final models' bytes: judged ones agreed, the others are checked before the job can
        # succeed (a disagreement fails it, and its bundle is not kept); the README names them, and
        # the bundle's self-check runs repro.py on them all the same, in its clean environment
        {model.blob.sha256: True for model in models},
        pinning,
    )
    located = result.localization is not None and result.localization.path == "layerwise"
    original_row = next(iter(iterations.list(job.id, 0, 1)), None)
    labels = [prepared.workspace.index.label(n) for n in sorted(result.min_bad.nodes)][:50]
    payload: AnswerPayload = {"min_bad_nodes": labels}
    if isinstance(bundle, NoBundle):  # its self-check did not reproduce, or it could not be built
        payload["bundle_checks"] = bundle.checks_run
        payload["bundle_refused"] = bundle.reason
    else:  # the bundle's own checks: reported apart from checks_run (the iterations')
        payload["bundle_checks"] = bundle[1]["checks_run"]
    if result.localization is not None:
        payload["localization"] = result.localization.to_json()
    return Finals(
        job_id=job.id,
        attempt=job.attempts,
        models=models,
        original=result.original,
        pinning=pinning,
        preflight=not located and iterations.all_reproduced(job.id),
        original_output=(original_row.output_tail or "") if original_row is not None else "",
        nodes_after=len(result.min_bad),
        payload=payload,
        repeats=max(1, reduction.machine.flakiness.repeats()) if result.flakiness is not None else 1,
        extra={ArtifactKind.BUNDLE: bundle} if not isinstance(bundle, NoBundle) else {},
    )


def _kind(value: str | None) -> VerdictKind:
    return VerdictKind(value or VerdictKind.INFRA_ERROR.value)


def succeed_verified(session: Session, job: Job, finals: Finals) -> int:
    """End ``job`` (row-locked) with its verified answer: the artifacts, then ``succeeded``, or
    ``failed`` (``unverified-result``) when a final check disagreed; returns the event's number."""
    artifacts = ArtifactRepository(session)
    for model in finals.models:
        meta = dict(model.meta)
        if model.kind is ArtifactKind.MIN_BAD:
            meta["suspect"] = finals.suspect.to_json() if finals.suspect is not None else None
        artifacts.put(job.id, model.kind, model.kind.value, model.blob, meta)
    job.nodes_after = job.best_size = finals.nodes_after
    disagreeing = [m for m in finals.models if m.meta.get("verified", {}).get("status") == DISAGREES]
    if not disagreeing:  # the bundle took the final models' verdicts: kept only when they agreed
        for kind, (blob, extra_meta) in finals.extra.items():
            artifacts.put(job.id, kind, kind.value, blob, extra_meta)
    if disagreeing:
        model = disagreeing[0]
        message = disagreement(_WHICH[model.kind], f"the {model.kind.value} artifact", _verified_of(model))
        return end(session, job, JobStatus.FAILED, ErrorCode.UNVERIFIED_RESULT, message)
    answer: AnswerPayload = finals.payload | {"verified": verified_of(finals)}
    if finals.suspect is not None:
        answer["suspect"] = finals.suspect.to_json()
    return succeed(session, job, answer)


def verified_of(finals: Finals) -> dict[str, Any]:
    got = {_WHICH[m.kind]: m.meta.get("verified") for m in finals.models}
    return {MIN_BAD: got.get(MIN_BAD), MIN_GOOD: got.get(MIN_GOOD)}


def _verified_of(model: FinalModel) -> Verified:
    data = model.meta.get("verified", {})
    verdict = Verdict(_kind(data.get("verdict")), str(data.get("signature", ""))) if data.get("verdict") else None
    return Verified(str(data.get("status")), str(data.get("sha256", "")), int(data.get("checks", 0)), verdict)


def run_finals(ctx: RunnerContext, prepared: PreparedJob, finals: Finals) -> int:
    """Run the final checks (outside any lock), then end the job; returns the end event's number
    (0: the job ended meanwhile, or the checks were stopped)."""
    heartbeat = Heartbeat(ctx, finals.job_id, finals.attempt)
    heartbeat.start()
    try:
        with stop_checks_when(_StopPoll(ctx, finals.job_id, heartbeat)):
            _check_models(prepared, finals)
            _preflight(prepared, finals)
    except CheckStoppedError:
        _stopped(ctx, finals.job_id)
        return 0
    finally:
        heartbeat.stop()
        for model in finals.models:
            if model.local is not None:
                shutil.rmtree(model.local.parent, ignore_errors=True)
    with ctx.db.session() as session:
        job = JobRepository(session).lock_running(finals.job_id)
        if job is None or job.attempts != finals.attempt:
            return 0
        return succeed_verified(session, job, finals)


def _check_models(prepared: PreparedJob, finals: Finals) -> None:
    for model in finals.models:
        if model.local is None:
            continue
        which = _WHICH[model.kind]
        runs = finals.repeats if which == MIN_BAD else 1  # failures are trusted, passes repeated
        checks = 0
        while True:
            verdict, output = prepared.check.run(model.local)
            checks += 1
            status = RECHECKED if agrees(verdict, which, finals.original, finals.pinning) else DISAGREES
            if status == RECHECKED or checks >= runs:
                break
        verified = Verified(status, model.blob.sha256, checks, verdict)
        model.meta["verified"] = verified.to_json()
        log.info("job %s: final check of %s: %s (%s)", finals.job_id, model.kind.value, status, verdict.kind.value)
        if status == DISAGREES:
            model.meta["final_output"] = output[-4000:]


def _preflight(prepared: PreparedJob, finals: Finals) -> None:
    if not finals.preflight:
        return
    folder = prepared.work_dir / "final-trivial"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FINAL_MODEL
    path.write_bytes(identity_model(prepared.workspace.index, prepared.workspace.ir_cap).SerializeToString())
    try:
        verdict, _ = prepared.check.run(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if verdict.reproduces(finals.original, finals.pinning):
        output = finals.original_output[-2000:] or finals.original.detail
        finals.suspect = Suspect(verdict, finals.original, checker_crash(finals.original_output), output)
        log.warning("job %s: %s", finals.job_id, finals.suspect.message)


class _StopPoll:
    """The stop scope's question: the lease lost, or the job row (at most every CANCEL_POLL_S)
    cancelled, ended or out of time."""

    def __init__(self, ctx: RunnerContext, job_id: str, heartbeat: Heartbeat) -> None:
        self.ctx, self.job_id, self.heartbeat = ctx, job_id, heartbeat
        self.last = 0.0

    def __call__(self) -> bool:
        if self.heartbeat.lost.is_set():
            return True
        now = time.monotonic()
        if now - self.last < CANCEL_POLL_S:
            return False
        self.last = now
        with self.ctx.db.session() as session:
            job = JobRepository(session).get(self.job_id)
            if job is None or job.cancel_requested or job.status != JobStatus.RUNNING:
                return True
            return utcnow() > deadline_of(job, self.ctx)


def _stopped(ctx: RunnerContext, job_id: str) -> None:
    with ctx.db.session() as session:
        job = JobRepository(session).get(job_id)
        if job is None:
            return
        cancelled, late = job.cancel_requested, utcnow() > deadline_of(job, ctx)
    if cancelled:
        end_job(ctx, job_id, JobStatus.CANCELLED, None, None)
    elif late:
        end_job(ctx, job_id, JobStatus.FAILED, ErrorCode.TIME_LIMIT, time_limit_message(ctx))

"""The end of a reduce job: its answer verified before it succeeds (``reducer_core.verification``).

When the session is done the job is ``finishing`` (``jobflow.ending.plan_end``) and its finish unit
(``worker.finishing``, outside any lock, holding the unit's lease) does this: ``plan_finals`` stores
min-bad and min-good (the very model a check of this job judged when that model is self-contained,
``judged``: no copy, no extra check; else a self-contained model that must be checked once more as
written) and the bug-report bundle, and asks for one check of a trivial model when every verdict of
the job reproduced the original failure (the check may not depend on the model); ``check_finals``
runs those checks; a short transaction then ends the job (``succeed_verified``): ``succeeded``
(with ``suspect`` in the min-bad artifact's meta when the trivial model failed like the original)
or, when a final check disagreed, ``failed`` with ``unverified-result``.

A verdict from the farm's cache was given by another job's check to a candidate of the same
fingerprint (graph, node set, check and options); the farm keeps no bytes, so the final model of
such a candidate is checked once more."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from engine.report_bundle import NoBundle, store_bundle
from engine.session import ReductionSession
from jobflow.answer import answer_payload
from jobflow.ending import end, succeed
from jobflow.reduction import FinalModel, judged_blobs, store_final_models
from persistence.enums import ArtifactKind, ErrorCode, JobStatus
from persistence.events import AnswerPayload
from persistence.models import Job
from persistence.repositories import ArtifactRepository, IterationRepository
from persistence.store import StoredBlob
from reducer_core.records import ReductionResult
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
from worker.prepared import PreparedJob

log = logging.getLogger("onnx_reducer.worker")
FINAL_MODEL = "final.onnx"
_WHICH = {ArtifactKind.MIN_BAD: MIN_BAD, ArtifactKind.MIN_GOOD: MIN_GOOD}


@dataclass
class Finals:
    """What ends a reduce job: its final models, whether a trivial model is checked, and what the
    end event says."""

    job_id: str
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


@dataclass(frozen=True)
class Evidence:
    """What the end reads of the job's rows (no lock): the models a check judged (``judged_blobs``),
    whether every verdict reproduced the failure, the original's check output."""

    judged: dict[ArtifactKind, StoredBlob]
    all_reproduced: bool
    original_output: str

    @classmethod
    def read(cls, db: Session, job_id: str, result: ReductionResult, pinning: bool | Pinning) -> Evidence:
        iterations = IterationRepository(db)
        original_row = next(iter(iterations.list(job_id, 0, 1)), None)
        output = (original_row.output_tail or "") if original_row is not None else ""
        return cls(judged_blobs(db, job_id, result, pinning), iterations.all_reproduced(job_id), output)


def plan_finals(
    ctx: RunnerContext,
    job_id: str,
    model_name: str,
    reduction: ReductionSession,
    prepared: PreparedJob,
    evidence: Evidence,
) -> Finals:
    """Store the final models (``judged`` ones reuse the model a check judged) and the bundle, and
    say which checks remain (the finish unit's work: outside any lock, ``worker.finishing``)."""
    result = reduction.result
    pinning = reduction.machine.config.pin_signature
    models = store_final_models(ctx.layout.store, prepared.workspace, result, prepared.work_dir, evidence.judged)
    bundle = store_bundle(
        ctx.layout.store,
        prepared.workspace,
        result,
        prepared.spec,
        prepared.session_check.golden,
        prepared.work_dir,
        model_name,
        ctx.worker,
        # the final models' bytes: judged ones agreed, the others are checked before the job can
        # succeed (a disagreement fails it, and its bundle is not kept); the README names them, and
        # the bundle's self-check runs repro.py on them all the same, in its clean environment
        {model.blob.sha256: True for model in models},
        pinning,
    )
    located = result.localization is not None and result.localization.path == "layerwise"
    payload = answer_payload(prepared.workspace, result)
    if isinstance(bundle, NoBundle):  # its self-check did not reproduce, or it could not be built
        payload["bundle_checks"] = bundle.checks_run
        payload["bundle_refused"] = bundle.reason
    else:  # the bundle's own checks: reported apart from checks_run (the iterations')
        payload["bundle_checks"] = bundle[1]["checks_run"]
    return Finals(
        job_id=job_id,
        models=models,
        original=result.original,
        pinning=pinning,
        preflight=not located and evidence.all_reproduced,
        original_output=evidence.original_output,
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


def check_finals(prepared: PreparedJob, finals: Finals) -> None:
    """Run the final checks (the caller's stop scope stops them: a cancel, the time limit, the
    finish unit's lease lost), then the final models' local copies go."""
    try:
        _check_models(prepared, finals)
        _preflight(prepared, finals)
    finally:
        for model in finals.models:
            if model.local is not None:
                shutil.rmtree(model.local.parent, ignore_errors=True)


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

"""The service's side of a ``task: precision`` job: the session ``run_job`` drives (an
``engine.precision.PrecisionSession``: the same hooks, verdict rows, state and resume as a
reduction) and what a finished job stores: the mixed-precision model as its ``mixed`` artifact,
whose meta (and the job's result, ``keep_fp32``) names the nodes kept in fp32. As on the command
line, the search's answer grows until no fp16 tensor of the file holds inf
(``PrecisionSession.finite_answer``; the job option ``allow_nonfinite`` keeps the search's answer); the
meta also holds ``finite`` (the nodes added, the fp16 tensors still holding inf) and the answer
for ModelOpt AutoCast (``nodes_to_exclude``: anchored name patterns) and TensorRT 10's trtexec
(``trtexec``: the flags).

The worker plugs these in at three places: starting the session (``worker.prepared``), storing
the results and the success event's payload (``worker.advance``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from engine.precision import Build, PrecisionPlan, PrecisionSession, autocast_patterns, reference_run, trtexec_flags
from engine.session import ReductionSession, SessionCheck
from engine.workspace import Workspace
from persistence.bundles import write_bundle
from persistence.enums import ArtifactKind
from persistence.events import AnswerPayload
from persistence.store import ArtifactStore, StoredBlob
from reducer_core.records import ReductionResult
from reducer_core.requests import SessionListener


def precision_plan(workspace: Workspace, check: SessionCheck, build: Build, work_dir: Path) -> PrecisionPlan:
    """The fp32 original's reference run (each process preparing the job runs it once; its
    verdict-cache identity is the same everywhere)."""
    return reference_run(workspace, check, build, work_dir / "precision-reference")


def start_precision(
    workspace: Workspace,
    plan: PrecisionPlan,
    mode: str,
    state: dict[str, Any] | None,
    listener: SessionListener | None = None,
) -> PrecisionSession:
    """The job's precision session, new or resumed from its stored state."""
    return PrecisionSession.begin(workspace, plan, mode, state, listener)


def store_precision_results(
    store: ArtifactStore,
    reduction: ReductionSession,
    result: ReductionResult,
    work_dir: Path,
    allow_nonfinite: bool = False,
) -> dict[ArtifactKind, tuple[StoredBlob, dict[str, Any]]]:
    """The mixed-precision model (a tar with its data file beyond protobuf's limit), its meta
    naming the nodes kept fp32. ``allow_nonfinite`` (the job's option, the CLI's
    ``--allow-nonfinite``): the search's answer as it is; ``finite`` names the fp16 tensors
    holding inf."""
    assert isinstance(reduction, PrecisionSession)
    folder = work_dir / "result-mixed"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    model = folder / "mixed.onnx"
    answer = reduction.finite_answer(result.min_bad, allow_nonfinite)  # no inf in any fp16 tensor unless allowed
    written = reduction.save_mixed(answer.candidate, model, verify=reduction.check.check)  # judged once more
    data = written.data
    keep = reduction.keep_fp32(answer.candidate)
    meta: dict[str, Any] = {"nodes": len(keep), "bundle": data is not None, **written.mixed.to_json()}
    meta["verified"] = written.verified_json()
    meta["finite"] = answer.to_json()
    outputs = {node.name: len(node.output) for node in reduction.workspace.index.nodes}
    meta |= {"nodes_to_exclude": autocast_patterns(keep), "trtexec": trtexec_flags(keep, outputs)}
    if data is None:
        blob = store.put_file(model)
    else:
        blob = store.put_file(write_bundle(folder / "mixed.tar", [(model.name, model), (data.name, data)]))
    shutil.rmtree(folder, ignore_errors=True)
    return {ArtifactKind.MIXED: (blob, meta)}


def written_fp32_nodes(stored: dict[ArtifactKind, tuple[StoredBlob, dict[str, Any]]]) -> int:
    """The job's ``nodes_after``: how many nodes the written (and verified) mixed model keeps in
    fp32, the search's answer grown until no fp16 tensor holds inf (6 nodes where the search
    answered 4, on the BERT-like case), not the search's count."""
    return int(stored[ArtifactKind.MIXED][1]["nodes"])


def precision_payload(
    reduction: ReductionSession, result: ReductionResult, allow_nonfinite: bool = False
) -> AnswerPayload:
    """What the success event adds for a precision job."""
    assert isinstance(reduction, PrecisionSession)
    answer = reduction.finite_answer(result.min_bad, allow_nonfinite)  # computed once, when the results were stored
    mixed = reduction.mixed(answer.candidate)
    return {
        "task": "precision",
        "keep_fp32": reduction.keep_fp32(answer.candidate),
        "fp32_tensors": list(mixed.fp32_tensors),
    }

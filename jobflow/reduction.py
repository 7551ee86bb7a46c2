"""What the worker and the api's interactive jobs share about a job's reduction session: its
options (``job_config``) and its final models (``store_final_models``: self-contained min-bad /
min-good, as a tar bundle when the weights exceed protobuf's limit and had to stay in a separate
data file, reusing the very model a check judged when it is self-contained: ``judged_blobs``,
``reducer_core.verification``)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from engine.workspace import Workspace
from persistence.bundles import write_bundle
from persistence.enums import ArtifactKind
from persistence.options import JobOptions
from persistence.repositories import IterationRepository
from persistence.store import ArtifactStore, StoredBlob
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.records import ReductionResult
from reducer_core.verdict import Pinning, Verdict, VerdictKind
from reducer_core.verification import JUDGED, MIN_BAD, MIN_GOOD, Verified, agrees

NOT_RECHECKED = "not-rechecked"  # an interactive job's final model differs from what the person judged


def job_config(mode: str, options: Mapping[str, Any]) -> SessionConfig:
    """A job's session options from its row (``JobOptions.from_stored``: a job stored before an
    option existed runs as it did, so its saved session resumes unchanged); min-good always wanted
    (it is stored). They matter to reduce jobs only: a precision job's session takes no
    ``SessionConfig``."""
    return JobOptions.from_stored(mode, options).session_config()


@dataclass
class FinalModel:
    """A model a reduce job hands over: ``blob`` and ``meta`` (its artifact), and ``local``, the
    self-contained file written for it (its data file beside it) while it awaits its final check;
    None when the blob is the very model a check judged (``meta["verified"]`` says so)."""

    kind: ArtifactKind
    candidate: Candidate
    blob: StoredBlob
    meta: dict[str, Any]
    local: Path | None = None


def store_final_models(
    store: ArtifactStore,
    workspace: Workspace,
    result: ReductionResult,
    work_dir: Path,
    judged: Mapping[ArtifactKind, StoredBlob],
) -> list[FinalModel]:
    """min-bad and min-good (when found): the ``judged`` blob of a self-contained model a check
    judged (no copy, no extra check), else a self-contained model stored and kept in ``work_dir``
    for its final check."""
    finals: list[FinalModel] = []
    for kind, candidate in ((ArtifactKind.MIN_BAD, result.min_bad), (ArtifactKind.MIN_GOOD, result.min_good)):
        if candidate is None:
            continue
        blob = judged.get(kind)
        if blob is not None:
            verified = Verified(JUDGED, blob.sha256).to_json()
            finals.append(
                FinalModel(kind, candidate, blob, {"nodes": len(candidate), "bundle": False, "verified": verified})
            )
            continue
        folder = work_dir / f"final-{kind.value}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        model = folder / f"{kind.value}.onnx"
        data = workspace.save_self_contained(candidate, model)
        meta: dict[str, Any] = {"nodes": len(candidate), "bundle": data is not None}
        if data is None:
            blob = store.put_file(model)
        else:
            blob = store.put_file(write_bundle(folder / f"{kind.value}.tar", [(model.name, model), (data.name, data)]))
        finals.append(FinalModel(kind, candidate, blob, meta, model))
    return finals


def judged_blobs(
    db: Session, job_id: str, result: ReductionResult, pinning: bool | Pinning
) -> dict[ArtifactKind, StoredBlob]:
    """The stored model a check of this job judged, for min-bad (a check reproduced the failure
    on it) and min-good (every check of it passed), when that model references no weight file
    (it is self-contained, so it can be handed over byte for byte)."""
    iterations = IterationRepository(db)
    judged: dict[ArtifactKind, StoredBlob] = {}
    wanted = {ArtifactKind.MIN_BAD: (MIN_BAD, result.min_bad), ArtifactKind.MIN_GOOD: (MIN_GOOD, result.min_good)}
    for kind, (which, candidate) in wanted.items():
        if candidate is None:
            continue
        rows = iterations.judged(job_id, candidate.fingerprint)
        verdicts = [
            Verdict(VerdictKind(row.verdict or VerdictKind.INFRA_ERROR.value), row.signature or "") for row, _ in rows
        ]
        ok = [agrees(v, which, result.original, pinning) for v in verdicts]
        if not ok or (which == MIN_GOOD and not all(ok)) or not any(ok):
            continue
        for (_, artifact), good in zip(rows, ok, strict=True):
            if good and artifact is not None and not artifact.meta.get("weights"):
                judged[kind] = StoredBlob(artifact.storage_key, artifact.sha256, artifact.size)
                break
    return judged

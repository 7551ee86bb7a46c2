"""What the worker and the api's interactive jobs share about a job's reduction session: its
options (``job_config``) and storing its final models (``store_results``: self-contained min-bad /
min-good, as a tar bundle when the weights exceed protobuf's limit and had to stay in a separate
data file)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from engine.workspace import Workspace
from persistence.bundles import write_bundle
from persistence.enums import ArtifactKind
from persistence.store import ArtifactStore, StoredBlob
from reducer_core.candidate import Candidate
from reducer_core.records import ReductionResult
from reducer_core.session import SessionConfig


def job_config(mode: str, options: dict[str, Any]) -> SessionConfig:
    """A job's session options: the command line's defaults; min-good always wanted (it is stored).
    ``confirm_flaky``: the api stores it with every new job (on unless the upload says false); a job
    stored before it existed has none and keeps it off, so its saved session resumes unchanged. It
    matters to reduce jobs only: a precision job's session takes no ``SessionConfig``. ``reduce_data``
    (smaller input sizes at the end) is on unless the options say false, also for stored jobs: on is
    the default a saved session records by leaving it out."""
    return SessionConfig(
        mode=mode,
        reduce_inputs=bool(options.get("reduce_inputs", True)),
        reduce_outputs=bool(options.get("reduce_outputs", True)),
        pin_signature=bool(options.get("pin_signature", True)),
        confirm_flaky=bool(options.get("confirm_flaky", False)),
        reduce_data=bool(options.get("reduce_data", True)),
        localize=True,
        min_good=True,
    )


def store_results(
    store: ArtifactStore, workspace: Workspace, result: ReductionResult, work_dir: Path
) -> dict[ArtifactKind, tuple[StoredBlob, dict[str, Any]]]:
    stored = {ArtifactKind.MIN_BAD: _store_model(store, workspace, result.min_bad, work_dir, "min-bad")}
    if result.min_good is not None:
        stored[ArtifactKind.MIN_GOOD] = _store_model(store, workspace, result.min_good, work_dir, "min-good")
    return stored


def _store_model(
    store: ArtifactStore, workspace: Workspace, candidate: Candidate, work_dir: Path, name: str
) -> tuple[StoredBlob, dict[str, Any]]:
    folder = work_dir / f"result-{name}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    model = folder / f"{name}.onnx"
    data = workspace.save_self_contained(candidate, model)
    meta: dict[str, Any] = {"nodes": len(candidate), "bundle": data is not None}
    if data is None:
        blob = store.put_file(model)
    else:
        blob = store.put_file(write_bundle(folder / f"{name}.tar", [(model.name, model), (data.name, data)]))
    shutil.rmtree(folder, ignore_errors=True)
    return blob, meta

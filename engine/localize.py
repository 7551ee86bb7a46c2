"""The layerwise run of the accuracy-debugging flowchart (compare/golden checks): the full model
once in both runtimes with every tensor marked as an output, in one isolated child process,
listing the tensors beyond tolerance in node order, with every compared tensor's error
(``TensorErrors``, read from a file the child writes). What to do with the list (the suspect node,
the fallback to reduction) is the session's pure part: ``reducer_core.localization``."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path

from checks.isolated import run_isolated
from checks.spec import CheckSpec
from engine.workspace import Workspace
from reducer_core.candidate import Candidate
from reducer_core.localization import MISMATCH_KINDS, LayerwiseResult, TensorErrors

LAYERWISE_ENTRY = "checks.kinds:layerwise"


def layerwise_run(
    workspace: Workspace, spec: CheckSpec, golden: Path | None, extra_env: Mapping[str, str] | None = None
) -> LayerwiseResult:
    """The layerwise run's verdict and its mismatching tensors ``(kind, tensor)`` in node order.
    ``extra_env``: added to the child's environment (a slot's ``CUDA_VISIBLE_DEVICES``)."""
    with tempfile.TemporaryDirectory(prefix="onnx-reducer-layerwise-", dir=workspace.options.work_dir) as tmp:
        path = Path(tmp) / "layerwise.onnx"
        errors_path = Path(tmp).resolve() / "errors.json"
        workspace.write(Candidate(workspace.index.all_nodes()), path)
        payload = {
            "entry": LAYERWISE_ENTRY,
            "spec": spec.to_json(),
            "model": str(path),
            "golden": str(golden.resolve()) if golden is not None else None,
            "errors": str(errors_path),
        }
        verdict, output = run_isolated(payload, spec.timeout, spec.memory_limit, extra_env)
        errors = _read_errors(errors_path)
    found = []
    for line in output.splitlines():
        kind, sep, tensor = line.partition("\t")
        if sep and kind in MISMATCH_KINDS:
            found.append((kind, tensor))
    return LayerwiseResult(verdict, tuple(found), errors)


def _read_errors(path: Path) -> TensorErrors | None:
    """The per-tensor errors the child wrote; None when it wrote none (it stopped early)."""
    try:
        return TensorErrors.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None

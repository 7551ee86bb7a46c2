"""Where a check's inputs come from on the command line (``reduce`` and ``precision``).

- ``--check-spec`` of kind compare/golden/error with ``--load-inputs``: the user's samples, every
  one (several files: several samples, in order). They are stored as golden values (onnxruntime
  CPU, every tensor) in a temporary file, so each candidate subgraph is fed the values it sees
  inside the full model, sample by sample; the spec's ``fail_if`` decides over the samples.
- ``--golden`` without ``--load-inputs``: the golden file's samples.
- neither: the spec's generated inputs (``seed``, ``input_range``).
- ``--golden`` and ``--load-inputs`` together with such a spec: refused (two sources of samples).
- a ``--check`` command, or a spec of kind op-present/command: the loaded values freeze removed
  branches and feed fallback inference, which takes one sample: several are refused.

Shapes and types of every loaded input are checked against the model before any check runs."""

from __future__ import annotations

import argparse
import atexit
import hashlib
import shutil
import tempfile
from pathlib import Path

import onnx

from checks.spec import CheckSpec
from checks.user_inputs import (
    complete_samples,
    generated_note,
    golden_from_samples,
    load_user_samples,
    require_one_sample,
    spec_reads_inputs,
)
from engine.session import file_sha256
from reducer_cli.progress import ProgressReporter
from reducer_core.errors import UsageError
from reducer_core.prepare import parse_shape_arg


def _read_model(path: str) -> onnx.ModelProto:
    try:
        return onnx.load(path, load_external_data=False)
    except (OSError, ValueError, onnx.onnx_cpp2py_export.checker.ValidationError) as exc:
        raise UsageError(f"Cannot read the model '{path}': {exc}") from exc


def check_golden(
    args: argparse.Namespace, spec: CheckSpec | None, golden: Path | None, log: ProgressReporter | None = None
) -> tuple[Path | None, str | None]:
    """The golden values the check reads: ``golden`` (``--golden``), or those made from
    ``--load-inputs`` for a spec that feeds inputs (module docstring). Loaded inputs are checked
    against the model (shapes, types) here, before any check runs. Also returns the digest that
    names made golden values in the verdict cache's identity (that of the input files: the file
    itself is rewritten on each run), None for ``--golden`` (its own digest)."""
    paths = list(getattr(args, "load_inputs", None) or [])
    if not paths:
        return golden, None
    model = _read_model(args.model)
    overrides = dict(parse_shape_arg(s) for s in getattr(args, "input_shapes", None) or [])
    loaded = load_user_samples(paths, model, overrides)
    if not spec_reads_inputs(spec):
        if spec is not None:
            what = f"a spec of kind {spec.kind} reads none of them, and freezing removed branches"
        elif getattr(args, "check", None) is not None:
            what = "a --check command reads its own inputs, and freezing removed branches"
        else:
            what = "freezing removed branches"
        require_one_sample(loaded, what)
        return golden, None
    assert spec is not None
    if golden is not None:
        raise UsageError(
            "--load-inputs and --golden both give the check's samples: make golden values from the inputs "
            "(onnx-reducer golden MODEL -o GOLDEN --load-inputs FILE...) and give only --golden, or give only "
            "--load-inputs."
        )
    if log is not None:
        if (note := generated_note(model, loaded)) is not None:
            log.warning(note)
        log.info(
            f"The check judges {len(loaded)} sample(s) from --load-inputs ({loaded.describe()}); "
            f"fail_if={spec.fail_if} over the samples."
        )
    low, high = spec.input_range
    samples = complete_samples(model, loaded, spec.seed, low, high)
    folder = Path(tempfile.mkdtemp(prefix="onnx-reducer-inputs-"))
    atexit.register(shutil.rmtree, folder, True)
    external = Path(args.external_data_dir) if getattr(args, "external_data_dir", None) else None
    made = golden_from_samples(Path(args.model), folder / "inputs.golden", samples, external)
    digest = hashlib.sha256()
    for path in paths:
        digest.update(file_sha256(Path(path)).encode())
    return made, "inputs:" + digest.hexdigest()

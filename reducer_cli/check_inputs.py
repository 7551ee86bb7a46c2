"""Where a check's inputs come from on the command line (``reduce`` and ``precision``).

- ``--check-spec`` of kind compare/golden/error with ``--load-inputs`` (or a
  ``--data-loader-script``: every feed dict it yields): the user's samples, every one (several
  files: several samples, in order). They are stored as golden values (onnxruntime CPU, every
  tensor) in a temporary file, so each candidate subgraph is fed the values it sees inside the
  full model, sample by sample; the spec's ``fail_if`` decides over the samples.
- ``--golden`` without them: the golden file's samples.
- none: the spec's generated inputs (``seed``, ``input_range``).
- two sources of samples together (``--golden``, ``--load-inputs``, ``--data-loader-script``), or
  ``--val-range`` (which would not change the spec's inputs), with such a spec: refused.
- a ``--check`` command, or a spec of kind op-present/command: the loaded values freeze removed
  branches and feed fallback inference, which takes one sample: several are refused.

Shapes and types of every loaded input (and of a golden file's inputs) are checked against the
model before any check runs."""

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
    check_golden_inputs,
    check_samples,
    complete_samples,
    generated_note,
    golden_from_samples,
    load_user_samples,
    require_one_sample,
    spec_reads_inputs,
)
from engine.data_loader import samples_from_script
from reducer_cli.progress import ProgressReporter
from reducer_core.errors import UsageError
from reducer_core.prepare import parse_shape_arg
from reducer_core.samples import InputSamples
from reducer_core.verification import file_sha256


def _read_model(path: str) -> onnx.ModelProto:
    try:
        return onnx.load(path, load_external_data=False)
    except (OSError, ValueError, onnx.onnx_cpp2py_export.checker.ValidationError) as exc:
        raise UsageError(f"Cannot read the model '{path}': {exc}") from exc


def check_golden(
    args: argparse.Namespace, spec: CheckSpec | None, golden: Path | None, log: ProgressReporter | None = None
) -> tuple[Path | None, str | None]:
    """The golden values the check reads: ``golden`` (``--golden``), or those made from
    ``--load-inputs`` (or a ``--data-loader-script``'s feed dicts) for a spec that feeds inputs
    (module docstring). Inputs are checked against the model (shapes, types) here, before any
    check runs; so are a golden file's. Also returns the digest that names made golden values in
    the verdict cache's identity (that of the input files: the file itself is rewritten on each
    run), None for ``--golden`` (its own digest)."""
    paths = list(getattr(args, "load_inputs", None) or [])
    script: str = getattr(args, "data_loader_script", None) or ""
    reads = spec_reads_inputs(spec)
    if reads and getattr(args, "val_range", None):
        raise UsageError(
            "--val-range sets generated values for fallback inference and frozen branches, not a check spec's "
            "inputs: set input_range (and seed) in the spec, or give samples with --load-inputs."
        )
    if not paths and not (reads and script):
        if golden is not None:
            check_golden_inputs(golden, _read_model(args.model), _overrides(args))
        return golden, None
    model = _read_model(args.model)
    if not reads:
        loaded = load_user_samples(paths, model, _overrides(args))
        require_one_sample(loaded, _why_one(args, spec))
        return golden, None
    assert spec is not None
    source = "--load-inputs" if paths else "--data-loader-script"
    if paths and script:
        raise UsageError("--load-inputs and --data-loader-script both give the check's samples: give only one of them.")
    if golden is not None:
        raise UsageError(
            f"{source} and --golden both give the check's samples: make golden values from the inputs "
            "(onnx-reducer golden MODEL -o GOLDEN --load-inputs FILE...) and give only --golden, or give only "
            f"{source}."
        )
    if paths:
        loaded = load_user_samples(paths, model, _overrides(args))
    else:
        loaded = script_samples(script, model, _overrides(args))
    if log is not None:
        if (note := generated_note(model, loaded)) is not None:
            log.warning(note)
        log.info(
            f"The check judges {len(loaded)} sample(s) from {source} ({loaded.describe()}); "
            f"fail_if={spec.fail_if} over the samples."
        )
    low, high = spec.input_range
    samples = complete_samples(model, loaded, spec.seed, low, high)
    folder = Path(tempfile.mkdtemp(prefix="onnx-reducer-inputs-"))
    atexit.register(shutil.rmtree, folder, True)
    external = Path(args.external_data_dir) if getattr(args, "external_data_dir", None) else None
    made = golden_from_samples(Path(args.model), folder / "inputs.golden", samples, external)
    digest = hashlib.sha256()
    for path in paths or [script.partition(":")[0]]:
        digest.update(file_sha256(Path(path)).encode())
    return made, "inputs:" + digest.hexdigest()


def script_samples(
    script: str, model: onnx.ModelProto, overrides: dict[str, list[int | str]] | None = None
) -> InputSamples:
    """Every feed dict a --data-loader-script yields, as samples checked against the model."""
    name = Path(script.partition(":")[0]).name
    samples = samples_from_script(script)
    labels = [f"{name}#{i}" for i in range(len(samples))]
    return check_samples(InputSamples(samples, labels), model, overrides)


def _overrides(args: argparse.Namespace) -> dict[str, list[int | str]]:
    return {name: list(dims) for name, dims in (parse_shape_arg(s) for s in getattr(args, "input_shapes", None) or [])}


def _why_one(args: argparse.Namespace, spec: CheckSpec | None) -> str:
    if spec is not None:
        return f"a spec of kind {spec.kind} reads none of them, and freezing removed branches"
    if getattr(args, "check", None) is not None:
        return "a --check command reads its own inputs, and freezing removed branches"
    return "freezing removed branches"

"""``onnx-reducer golden MODEL -o GOLDEN``: inputs plus every tensor's value, for ``--golden``."""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx

from checks.golden import write_golden
from checks.ort_runtime import random_inputs
from checks.user_inputs import complete_samples, generated_note, load_user_samples
from reducer_cli import args as cli_args
from reducer_cli.progress import ProgressReporter
from reducer_core.errors import InvalidModelError, UsageError
from reducer_core.tensors import TensorMap


def golden_samples(ns: argparse.Namespace, model: onnx.ModelProto, log: ProgressReporter) -> list[TensorMap]:
    """Samples from --load-inputs (several files: several samples, in order; missing inputs
    generated), else ``--samples`` generated ones. Shapes and types are checked first."""
    low, high = ns.input_range
    if ns.samples < 1:
        raise UsageError("--samples must be at least 1.")
    if not ns.load_inputs:
        return [random_inputs(model, ns.seed + i, low, high) for i in range(ns.samples)]
    loaded = load_user_samples(ns.load_inputs, model)
    if (note := generated_note(model, loaded)) is not None:
        log.warning(note)
    log.info(f"{len(loaded)} sample(s) from --load-inputs: {loaded.describe()}")
    return complete_samples(model, loaded, ns.seed, low, high)


def run_golden(ns: argparse.Namespace) -> int:
    log = ProgressReporter(live=False)
    model_path = Path(ns.model)
    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except OSError as exc:
        raise UsageError(f"Cannot read the model '{model_path}': {exc}") from exc
    except Exception as exc:  # protobuf raises DecodeError and others
        raise InvalidModelError(
            f"'{model_path}' is not a readable ONNX model ({type(exc).__name__}: {exc}). Is the file truncated "
            "or not an .onnx file? Export or copy it again."
        ) from exc
    samples = golden_samples(ns, model, log)
    external = Path(ns.external_data_dir) if ns.external_data_dir else None
    tensors, runs = write_golden(model_path, Path(ns.output), samples, external, int(ns.chunk_mb * 1024 * 1024))
    log.info(f"Wrote {tensors} tensor(s) for {len(samples)} sample(s) to {ns.output} ({runs} onnxruntime run(s)).")
    return cli_args.EXIT_OK

"""``onnx-reducer golden MODEL -o GOLDEN``: inputs plus every tensor's value, for ``--golden``."""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx

from reducer_cli import args as cli_args
from reducer_cli.progress import ProgressReporter
from reducer_core.errors import InvalidModelError, UsageError
from reducer_core.tensors import TensorMap, load_tensor_file, merge_samples


def golden_samples(ns: argparse.Namespace, model: onnx.ModelProto) -> list[TensorMap]:
    """Samples from --load-inputs (missing inputs generated), else ``--samples`` generated ones."""
    from checks.ort_runtime import random_inputs

    low, high = ns.input_range
    if ns.samples < 1:
        raise UsageError("--samples must be at least 1.")
    loaded = merge_samples([load_tensor_file(p) for p in ns.load_inputs]) if ns.load_inputs else []
    count = len(loaded) or ns.samples
    samples: list[TensorMap] = []
    for i in range(count):
        generated = random_inputs(model, ns.seed + i, low, high)
        given = loaded[i] if i < len(loaded) else {}
        samples.append({name: given.get(name, value) for name, value in generated.items()})
    return samples


def run_golden(ns: argparse.Namespace) -> int:
    from checks.golden import write_golden

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
    samples = golden_samples(ns, model)
    external = Path(ns.external_data_dir) if ns.external_data_dir else None
    tensors, runs = write_golden(model_path, Path(ns.output), samples, external, int(ns.chunk_mb * 1024 * 1024))
    log.info(f"Wrote {tensors} tensor(s) for {len(samples)} sample(s) to {ns.output} ({runs} onnxruntime run(s)).")
    return cli_args.EXIT_OK

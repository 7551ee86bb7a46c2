"""The user's input files (``--load-inputs``, the service's inputs upload) as a check's samples.

``load_user_samples`` reads the files (several files are several samples, in order:
``reducer_core.samples``) and checks every input's shape and type against the model, in one line
per problem, before any check runs. ``golden_from_samples`` runs the model on onnxruntime CPU for
each sample and stores every tensor (``checks.golden``), so that a spec check judges every
candidate subgraph on the values it sees inside the full model for each of the user's samples."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx

from checks.golden import DEFAULT_CHUNK_BYTES, GoldenStore, write_golden
from checks.ort_runtime import random_inputs
from checks.spec import CheckSpec
from reducer_core.errors import UsageError
from reducer_core.samples import (
    InputSamples,
    check_input_samples,
    input_samples,
    input_signatures,
    missing_inputs,
    model_tensor_names,
)
from reducer_core.tensors import TensorMap, load_tensor_file

# Spec kinds whose check feeds inputs to the model (op-present and command read none of ours).
INPUT_KINDS = ("compare", "golden", "error")


def load_user_samples(
    paths: Sequence[str | Path],
    model: onnx.ModelProto,
    overrides: Mapping[str, Sequence[int | str]] | None = None,
    names: Sequence[str] | None = None,
) -> InputSamples:
    """Samples of ``paths`` checked against ``model``'s inputs. ``names``: how the files are called
    in messages (the service's upload names; default: the file names)."""
    shown = list(names) if names is not None else [Path(p).name for p in paths]
    files = [(label, load_tensor_file(path)) for label, path in zip(shown, paths, strict=True)]
    signatures = input_signatures(model, overrides)
    loaded = input_samples(files, list(signatures), model_tensor_names(model))
    check_input_samples(loaded, signatures)
    return loaded


def check_samples(
    loaded: InputSamples, model: onnx.ModelProto, overrides: Mapping[str, Sequence[int | str]] | None = None
) -> InputSamples:
    """``loaded`` checked against ``model``'s inputs (shapes, types); returned for chaining."""
    check_input_samples(loaded, input_signatures(model, overrides))
    return loaded


def check_golden_inputs(
    path: Path, model: onnx.ModelProto, overrides: Mapping[str, Sequence[int | str]] | None = None
) -> int:
    """The inputs stored in a golden file (``onnx-reducer golden``, Polygraphy JSON or ``.npz``)
    checked against ``model``'s, sample by sample; returns the number of samples."""
    signatures = input_signatures(model, overrides)
    store = GoldenStore.open(path)
    try:
        samples = [
            {name: store.read(i, name) for name in signatures if store.has(i, name)} for i in range(store.samples)
        ]
    finally:
        store.close()
    labels = [f"{path.name}#{i}" if len(samples) > 1 else path.name for i in range(len(samples))]
    check_input_samples(InputSamples(samples, labels), signatures)
    return len(samples)


def complete_samples(
    model: onnx.ModelProto, loaded: InputSamples, seed: int, low: float, high: float
) -> list[TensorMap]:
    """Each sample with the model inputs it lacks generated (sample i: seed + i, in [low, high))."""
    samples: list[TensorMap] = []
    for i, given in enumerate(loaded.samples):
        generated = random_inputs(model, seed + i, low, high)
        samples.append({**{name: given.get(name, value) for name, value in generated.items()}, **given})
    return samples


def generated_note(model: onnx.ModelProto, loaded: InputSamples) -> str | None:
    """A line naming the inputs a sample lacks (they are generated), or None."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    gaps = missing_inputs(loaded, inputs)
    if not gaps:
        return None
    parts = "; ".join(f"sample {i} ({loaded.labels[i]}): {', '.join(names)}" for i, names in gaps)
    return f"Inputs missing from the input files are generated: {parts}."


def require_one_sample(loaded: InputSamples, why: str) -> None:
    """Refuse several samples where only one can be used (``why``: what would use it)."""
    if len(loaded) > 1:
        raise UsageError(
            f"--load-inputs gives {len(loaded)} samples ({loaded.describe()}), but {why} uses one: "
            "give a single sample, or use --check-spec with kind compare, golden or error, which judges every sample."
        )


def golden_from_samples(
    model_path: Path,
    dest: Path,
    samples: list[TensorMap],
    external_data_dir: Path | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Path:
    """Golden values (every tensor, onnxruntime CPU) for each sample, written to ``dest``."""
    write_golden(model_path, dest, samples, external_data_dir, chunk_bytes)
    return dest


def spec_reads_inputs(spec: CheckSpec | None) -> bool:
    return spec is not None and spec.kind in INPUT_KINDS

"""Input values for fallback inference and frozen branches, as Polygraphy's data loader options
give them: ``--data-loader-script SCRIPT.py[:FUNC]`` and ``--val-range [min,max] NAME:[min,max]``."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from checks.ort_runtime import tensor_like
from reducer_core.errors import UsageError
from reducer_core.tensors import TensorMap

Range = tuple[float, float]


def parse_val_range(text: str) -> tuple[str, Range]:
    """``[0,1]`` (every input) or ``NAME:[0,1]``; the name is "" for the default range."""
    name, sep, bounds = text.rpartition(":")
    bounds = bounds.strip()
    if not (bounds.startswith("[") and bounds.endswith("]")):
        raise UsageError(f"Cannot parse --val-range '{text}'. Use [min,max] or NAME:[min,max], e.g. x:[0,1].")
    parts = [p.strip() for p in bounds[1:-1].split(",")]
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise UsageError(f"--val-range '{text}' needs two numbers, e.g. [0,1].") from None
    if low > high:
        raise UsageError(f"--val-range '{text}': min {low} is above max {high}.")
    return (name if sep else ""), (low, high)


def parse_val_ranges(texts: Sequence[str]) -> dict[str, Range]:
    return dict(parse_val_range(t) for t in texts)


def feeds_from_script(spec: str) -> TensorMap:
    """The first feed dict a user's data loader function yields (Polygraphy's --data-loader-script)."""
    return samples_from_script(spec, 1)[0]


MAX_SCRIPT_SAMPLES = 100


def samples_from_script(spec: str, limit: int = MAX_SCRIPT_SAMPLES) -> list[TensorMap]:
    """The feed dicts a user's data loader function yields, at most ``limit`` (more is refused
    unless ``limit`` is 1: then the first one is taken, as for fallback inference)."""
    path_text, _, function = spec.partition(":")
    path = Path(path_text)
    name = function or "load_data"
    if not path.is_file():
        raise UsageError(f"--data-loader-script: '{path}' does not exist.")
    module_spec = importlib.util.spec_from_file_location("onnx_reducer_user_data_loader", path)
    if module_spec is None or module_spec.loader is None:
        raise UsageError(f"--data-loader-script: cannot import '{path}' as a Python module.")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    loader = getattr(module, name, None)
    if not callable(loader):
        raise UsageError(f"--data-loader-script: '{path}' defines no function '{name}'.")
    samples: list[TensorMap] = []
    for feed in loader():
        if len(samples) == limit:
            if limit == 1:
                break
            raise UsageError(
                f"--data-loader-script: {name}() in '{path}' yields more than {limit} feed dicts; a check judges "
                f"each one, so yield at most {limit}."
            )
        samples.append({str(key): np.asarray(value) for key, value in dict(feed).items()})
    if not samples:
        raise UsageError(f"--data-loader-script: {name}() in '{path}' yielded no feed dict.")
    return samples


def ranged_inputs(
    model_inputs: Mapping[str, tuple[int, list[int]]], ranges: Mapping[str, Range], seed: int
) -> TensorMap:
    """Uniform values in each input's range (the default range under ""; [0, 1] without one)."""
    rng = np.random.default_rng(seed)
    default = ranges.get("", (0.0, 1.0))
    return {
        name: tensor_like(rng, elem_type, shape, *ranges.get(name, default))
        for name, (elem_type, shape) in model_inputs.items()
    }

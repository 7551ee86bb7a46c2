"""The user's input samples: several files are several samples, in order; each is checked against
the model's inputs (names, shapes, element types) before any check runs.

A file that holds at least one of the model's inputs gives samples (a ``.npz`` is one sample, a
Polygraphy JSON list of feed dicts one sample per dict); files are concatenated in the order given,
as Polygraphy's ``--load-inputs`` does. A file that holds none of the model's inputs but some of
its other tensors (Polygraphy's layerwise outputs, ``polygraphy run --save-outputs``) adds values
to the samples, sample by sample (values for frozen branches). A file that holds neither is refused.

A check that judges several samples writes ``samples_note`` into its verdict's detail
(``samples failing: [1] of 3 judged``); ``parse_samples_note`` reads it back for the log, the
summary JSON and the service."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from reducer_core.errors import UsageError
from reducer_core.records import ReductionResult
from reducer_core.tensors import TensorMap
from reducer_core.verdict import Verdict

Dims = list[int | str]


@dataclass(frozen=True)
class InputSamples:
    """Samples in order, each with a label naming where it came from (``big.npz``, ``in.json#1``)."""

    samples: list[TensorMap] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.samples)

    def describe(self) -> str:
        return ", ".join(f"{i}: {label}" for i, label in enumerate(self.labels))


@dataclass(frozen=True)
class InputSignature:
    """A graph input's element type (numpy) and dims (an int, or a name for a free dim)."""

    dtype: np.dtype | None
    dims: Dims | None  # None: the rank is unknown

    def show(self) -> str:
        dtype = str(self.dtype) if self.dtype is not None else "any type"
        dims = "[" + ", ".join(str(d) for d in self.dims) + "]" if self.dims is not None else "[any shape]"
        return f"{dtype} {dims}"


def input_signatures(
    model: onnx.ModelProto, overrides: Mapping[str, Sequence[int | str]] | None = None
) -> dict[str, InputSignature]:
    """The model's graph inputs (initializers left out); ``overrides``: ``--model-input-shapes``."""
    initializers = {t.name for t in model.graph.initializer}
    found: dict[str, InputSignature] = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        tensor = info.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)) if tensor.elem_type else None
        dims: Dims | None = None
        if tensor.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
        if overrides and info.name in overrides:
            dims = list(overrides[info.name])
        found[info.name] = InputSignature(dtype, dims)
    return found


def model_tensor_names(model: onnx.ModelProto) -> set[str]:
    names = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    for node in model.graph.node:
        names.update(node.output)
    return names


def input_samples(
    files: Sequence[tuple[str, list[TensorMap]]], inputs: Sequence[str], tensors: set[str] | None = None
) -> InputSamples:
    """Samples from ``(file name, samples)`` pairs: files with model inputs concatenated in order,
    files with other model tensors only merged into them sample by sample. ``tensors``: every tensor
    name of the model (a file naming none of them is refused)."""
    wanted = set(inputs)
    samples: list[TensorMap] = []
    labels: list[str] = []
    values: list[tuple[str, list[TensorMap]]] = []
    for name, content in files:
        if any(wanted & set(sample) for sample in content):
            for i, sample in enumerate(content):
                samples.append(dict(sample))
                labels.append(name if len(content) == 1 else f"{name}#{i}")
            continue
        known = set().union(*(set(s) for s in content)) & (tensors or set())
        if tensors is not None and wanted and not known:
            held = sorted(set().union(*(set(s) for s in content)))
            raise UsageError(
                f"'{name}' holds none of the model's inputs ({', '.join(sorted(wanted))}) nor any of its tensors "
                f"(it holds {', '.join(held[:5])}{'...' if len(held) > 5 else ''}): rename its arrays to the "
                "model's input names (see `onnx-reducer inspect MODEL`)."
            )
        values.append((name, content))
    for name, content in values:
        for i, sample in enumerate(content):
            if i == len(samples):
                samples.append({})
                labels.append(f"{name}#{i}")
            for key, value in sample.items():
                samples[i].setdefault(key, value)
    return InputSamples(samples, labels)


def check_input_samples(loaded: InputSamples, signatures: Mapping[str, InputSignature]) -> None:
    """Refuse, in one line, a sample whose input has another rank, dim or element type than the
    model's (before any check runs: onnxruntime would fail with a traceback)."""
    for index, sample in enumerate(loaded.samples):
        for name, signature in signatures.items():
            if name not in sample:
                continue
            value = np.asarray(sample[name])
            if _fits(value, signature):
                continue
            where = loaded.labels[index] if index < len(loaded.labels) else f"sample {index}"
            held = InputSignature(value.dtype, list(value.shape)).show()
            hint = (
                " Give one sample per file (several files, or a Polygraphy JSON list of feed dicts), "
                "not samples stacked into one array."
                if signature.dims is not None and value.ndim == len(signature.dims) + 1
                else " Save the input with the model's shape and type (see `onnx-reducer inspect MODEL`)."
            )
            raise UsageError(
                f"Input '{name}' of sample {index} ({where}): the model wants {signature.show()}, "
                f"the file holds {held}.{hint}"
            )


def _fits(value: np.ndarray, signature: InputSignature) -> bool:
    if signature.dtype is not None and value.dtype != signature.dtype:
        return False
    if signature.dims is None:
        return True
    if value.ndim != len(signature.dims):
        return False
    return all(not isinstance(d, int) or d <= 0 or d == n for d, n in zip(signature.dims, value.shape, strict=True))


def missing_inputs(loaded: InputSamples, inputs: Sequence[str]) -> list[tuple[int, list[str]]]:
    """The model inputs each sample lacks (they are generated)."""
    gaps = [(i, [n for n in inputs if n not in sample]) for i, sample in enumerate(loaded.samples)]
    return [(i, names) for i, names in gaps if names]


# --- the verdict's note ----------------------------------------------------------------------------

_NOTE = re.compile(r"samples failing: \[(?P<failing>[\d, ]*)\] of (?P<judged>\d+) judged")


@dataclass(frozen=True)
class SampleReport:
    """How many samples a check judged and which ones failed (indices in input order)."""

    judged: int
    failing: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {"judged": self.judged, "failing": list(self.failing)}

    def describe(self) -> str:
        if not self.failing:
            return f"no sample of {self.judged} fails"
        return f"sample(s) {', '.join(str(i) for i in self.failing)} of {self.judged} fail"


def samples_note(judged: int, failing: Sequence[int]) -> str:
    return f"samples failing: [{', '.join(str(i) for i in failing)}] of {judged} judged"


def parse_samples_note(detail: str) -> SampleReport | None:
    found = _NOTE.search(detail)
    if found is None:
        return None
    failing = tuple(int(p) for p in found.group("failing").replace(" ", "").split(",") if p)
    return SampleReport(int(found.group("judged")), failing)


def min_bad_verdict(result: ReductionResult) -> Verdict:
    """The verdict of the reduction's answer: its last check that counted (the original's when the
    answer is the whole model)."""
    for record in reversed(result.iterations):
        if record.candidate.fingerprint == result.min_bad.fingerprint and record.reproduces:
            return record.verdict
    return result.original


def samples_summary(result: ReductionResult) -> dict[str, object]:
    """``{"samples": {"original": {judged, failing}, "min_bad": {...}}}`` for a check that judged
    several samples (kinds compare, golden, error), else ``{}``."""
    original = parse_samples_note(result.original.detail)
    if original is None:
        return {}
    answer = parse_samples_note(min_bad_verdict(result).detail)
    return {
        "samples": {
            "original": original.to_json(),
            "min_bad": answer.to_json() if answer is not None else None,
        }
    }


def samples_lines(result: ReductionResult) -> list[str]:
    """Log lines: how many samples were judged and which ones fail, for the original and the answer."""
    original = parse_samples_note(result.original.detail)
    if original is None:
        return []
    lines = [f"samples judged: {original.judged}; original model: {original.describe()}"]
    answer = parse_samples_note(min_bad_verdict(result).detail)
    if answer is not None:
        lines.append(f"minimal model ({len(result.min_bad)} nodes): {answer.describe()}")
    return lines

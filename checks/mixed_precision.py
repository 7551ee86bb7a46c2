"""Nodes a check keeps in fp32 when it converts a model to fp16.

``onnx-reducer precision`` hands each candidate's set to the check inside the candidate model
itself: a ``metadata_props`` entry ``onnx_reducer.keep_fp32`` holding a JSON list of node names.
An onnxruntime target with ``precision: fp16`` converts every other node and keeps these in fp32
(``checks.runtimes.onnxruntime``), so the check spec stays the user's, a verdict depends only on
the model file, and an iteration model re-checked by hand gives the same verdict."""

from __future__ import annotations

import json

import onnx

from checks.spec import CheckSpec
from reducer_core.errors import UsageError

KEEP_FP32_KEY = "onnx_reducer.keep_fp32"
SPEC_ADVICE = (
    "precision needs a check spec that runs the model in fp16 on onnxruntime and fails on the fp16 model: "
    "kind compare (reference fp32, target {runtime: onnxruntime, precision: fp16}), golden or error with "
    "target {precision: fp16}."
)


def keep_fp32_of(model: onnx.ModelProto) -> frozenset[str]:
    """The node names ``model`` asks to keep in fp32 (the last entry wins; none when absent)."""
    names: frozenset[str] = frozenset()
    for entry in model.metadata_props:
        if entry.key == KEEP_FP32_KEY:
            names = frozenset(_names(entry.value))
    return names


def _names(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def without_keep_fp32(model: onnx.ModelProto) -> None:
    """Remove the entry in place (a finished mixed-precision model does not carry it)."""
    kept = [e for e in model.metadata_props if e.key != KEEP_FP32_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)


def require_fp16_target(spec: CheckSpec | None) -> CheckSpec:
    """The spec, when its target converts the model to fp16 on onnxruntime (the conversion that
    honours the kept set); a clear ``UsageError`` otherwise."""
    if spec is None:
        raise UsageError(f"Give --check-spec SPEC: {SPEC_ADVICE}")
    target = spec.target
    if spec.kind not in ("compare", "golden", "error") or target is None:
        raise UsageError(f"Check spec kind '{spec.kind}' cannot keep nodes in fp32. {SPEC_ADVICE}")
    if target.precision != "fp16" or target.runtime != "onnxruntime":
        raise UsageError(f"The spec's target runs {target.runtime}/{target.precision}. {SPEC_ADVICE}")
    return spec

"""A job's requirements as stored (``jobs.requires``): the ``requires`` of its check spec, parsed
once at intake (``checks.requirements.Requirements.to_json``) and read back here without parsing
the spec again, so fair share matches each take's work against a worker's capabilities from the
row alone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checks.requirements import Requirements


def stored_requirements(data: Mapping[str, Any] | None) -> Requirements:
    """``Requirements`` from the JSON ``Requirements.to_json`` wrote (None or ``{}``: none)."""
    if not data:
        return Requirements()
    onnxruntime, tensorrt = data.get("onnxruntime"), data.get("tensorrt")
    return Requirements(
        gpu=tuple(str(name) for name in data.get("gpu") or ()),
        onnxruntime=str(onnxruntime) if onnxruntime else None,
        tensorrt=str(tensorrt) if tensorrt else None,
        providers=tuple(str(name) for name in data.get("provider") or ()),
    )

"""Runtimes a check runs a model in. The runtime library itself (onnxruntime, TensorRT) is imported
only when a runner is built, inside the check's child process: ``make_runner(spec, model, workdir)``
returns a ``Runner`` for an onnxruntime or TensorRT target."""

from __future__ import annotations

from pathlib import Path

import onnx

from checks.runtimes.base import Runner, RuntimeUnavailableError
from checks.runtimes.onnxruntime import OrtRunner
from checks.runtimes.tensorrt import TensorRTRunner
from checks.spec import RuntimeSpec

__all__ = ["Runner", "RuntimeUnavailableError", "make_runner"]


def make_runner(spec: RuntimeSpec, model: onnx.ModelProto, workdir: Path) -> Runner:
    """Build (load, convert, compile) ``model`` for ``spec``; runtime errors propagate."""
    if spec.runtime == "tensorrt":
        return TensorRTRunner(spec, model, workdir)
    return OrtRunner(spec, model, workdir)

"""Runtimes a check runs a model in. Each is imported lazily, inside the check's child process:
``make_runner(spec, model, workdir)`` returns a ``Runner`` for an onnxruntime or TensorRT target."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import numpy as np
import onnx

from checks.spec import RuntimeSpec


class RuntimeUnavailableError(RuntimeError):
    """The runtime (or execution provider) is not installed here: an infra-error, not a verdict."""


class Runner(Protocol):
    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...


def make_runner(spec: RuntimeSpec, model: onnx.ModelProto, workdir: Path) -> Runner:
    """Build (load, convert, compile) ``model`` for ``spec``; runtime errors propagate."""
    if spec.runtime == "tensorrt":
        from checks.runtimes.tensorrt import TensorRTRunner

        return TensorRTRunner(spec, model, workdir)
    from checks.runtimes.onnxruntime import OrtRunner

    return OrtRunner(spec, model, workdir)

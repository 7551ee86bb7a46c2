"""TensorRT targets (GPU workers only; imported lazily): an engine built from the candidate with
fp32, fp16, bf16 or int8 (calibrated on the check's own inputs), run through Polygraphy's
TensorRT backend."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from checks.runtimes import RuntimeUnavailableError
from checks.spec import RuntimeSpec


class TensorRTRunner:
    def __init__(self, spec: RuntimeSpec, model: onnx.ModelProto, workdir: Path) -> None:
        try:
            import tensorrt  # noqa: F401
            from polygraphy.backend import trt as poly_trt
        except ImportError as exc:
            raise RuntimeUnavailableError(f"TensorRT is not installed here ({exc}); run on a GPU worker") from exc
        self._trt = poly_trt
        self.spec = spec
        self.path = workdir / "trt_candidate.onnx"
        onnx.save(model, str(self.path), save_as_external_data=model.ByteSize() > 1_800_000_000)
        self._runner: Any = None

    def _build(self, feeds: Mapping[str, np.ndarray]) -> Any:
        poly_trt = self._trt
        precision = self.spec.precision
        calibrator = poly_trt.Calibrator([dict(feeds)]) if precision == "int8" else None
        config = poly_trt.CreateConfig(
            fp16=precision == "fp16",
            bf16=precision == "bf16",
            int8=precision == "int8",
            calibrator=calibrator,
        )
        network = poly_trt.NetworkFromOnnxPath(str(self.path))
        engine = poly_trt.EngineFromNetwork(network, config=config)
        return poly_trt.TrtRunner(engine)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._runner is None:
            self._runner = self._build(feeds)
            self._runner.activate()
        outputs = self._runner.infer(dict(feeds))
        return {name: np.asarray(value) for name, value in outputs.items()}

"""TensorRT targets (GPU workers only; imported lazily): an engine built from the candidate with
fp32, fp16, bf16 or int8, run through Polygraphy's TensorRT backend.

TensorRT 10 builds a weakly typed network and takes the precision as builder flags (``fp16``,
``bf16``, ``int8`` calibrated on the check's own inputs). TensorRT 11 removed those flags and the
calibrators: every network is strongly typed, so the precision must be in the model itself. There
the fp16 model is converted in ONNX first, as ``precision`` writes it (onnxconverter-common, inputs
and outputs kept fp32, the nodes the model names in ``checks.mixed_precision`` kept fp32), and
built strongly typed; bf16 and int8 (which would need a bf16 or a quantized Q/DQ model) are refused
with a message saying so."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from checks.mixed_precision import keep_fp32_of
from checks.runtimes.base import RuntimeUnavailableError
from checks.runtimes.onnxruntime import to_fp16
from checks.spec import TRT_TACTIC_SOURCES, RuntimeSpec

STRONGLY_TYPED_FROM = 11  # the first TensorRT major without builder precision flags


def tensorrt_major(version: str) -> int:
    """The major of a ``tensorrt.__version__`` ("10.8.0.43" -> 10); 0 when unreadable."""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


@dataclass(frozen=True)
class BuildPlan:
    """How the engine is built: from which model, strongly typed or with which builder flags."""

    convert_to_fp16: bool  # the model is converted to fp16 in ONNX before the build
    strongly_typed: bool
    fp16: bool = False
    bf16: bool = False
    int8: bool = False


def build_plan(precision: str, major: int) -> BuildPlan:
    """The build of ``precision`` on TensorRT ``major``; raises RuntimeUnavailableError for what
    that TensorRT cannot build."""
    if major < STRONGLY_TYPED_FROM:
        return BuildPlan(
            convert_to_fp16=False,
            strongly_typed=False,
            fp16=precision == "fp16",
            bf16=precision == "bf16",
            int8=precision == "int8",
        )
    if precision in ("bf16", "int8"):
        raise RuntimeUnavailableError(
            f"TensorRT {major} builds strongly typed networks only (no {precision} builder flag, no calibrator): "
            f"precision {precision} needs a model that is already {precision} (bf16 tensors, or Q/DQ nodes for "
            "int8). Use precision fp16 or fp32 here, or run the check on a TensorRT 10 worker."
        )
    return BuildPlan(convert_to_fp16=precision == "fp16", strongly_typed=True)


def default_tactic_sources(trt: Any) -> list[str]:
    """The tactic sources a fresh builder config enables (``IBuilderConfig.get_tactic_sources``, a
    bit mask over ``trt.TacticSource``), by name."""
    builder = trt.Builder(trt.Logger(trt.Logger.WARNING))
    mask = int(builder.create_builder_config().get_tactic_sources())
    return [name for name, source in trt.TacticSource.__members__.items() if mask & (1 << int(source))]


def config_options(plan: BuildPlan, disabled: tuple[str, ...], trt: Any) -> dict[str, Any]:
    """Polygraphy ``CreateConfig`` keywords of a weakly typed build with the spec's
    ``disabled_build_options`` turned off: the FP16 flag and tactic sources (the default ones less
    the disabled; none given: TensorRT's default). TF32 stays off, Polygraphy's default."""
    options: dict[str, Any] = {
        "fp16": plan.fp16 and "FP16" not in disabled,
        "bf16": plan.bf16,
        "int8": plan.int8,
    }
    options.update(tactic_options(disabled, trt))
    return options


def tactic_options(disabled: tuple[str, ...], trt: Any) -> dict[str, Any]:
    """``tactic_sources`` for ``CreateConfig`` when a tactic source is disabled; {} otherwise."""
    if not any(name in TRT_TACTIC_SOURCES for name in disabled):
        return {}
    sources = trt.TacticSource.__members__
    return {"tactic_sources": [sources[name] for name in default_tactic_sources(trt) if name not in disabled]}


class TensorRTRunner:
    def __init__(self, spec: RuntimeSpec, model: onnx.ModelProto, workdir: Path) -> None:
        try:
            import tensorrt  # noqa: PLC0415 - optional: TensorRT exists on GPU workers only
            from polygraphy.backend import trt as poly_trt  # noqa: PLC0415 - optional: TensorRT exists on GPU workers only
        except ImportError as exc:
            raise RuntimeUnavailableError(f"TensorRT is not installed here ({exc}); run on a GPU worker") from exc
        self._trt = poly_trt
        self._tensorrt = tensorrt
        self.spec = spec
        self.major = tensorrt_major(str(getattr(tensorrt, "__version__", "")))
        self.plan = build_plan(spec.precision, self.major)
        if self.plan.convert_to_fp16:
            model = to_fp16(model, keep_fp32_of(model))
        self.path = workdir / "trt_candidate.onnx"
        onnx.save(model, str(self.path), save_as_external_data=model.ByteSize() > 1_800_000_000)
        self._runner: Any = None

    def loaders(self, feeds: Mapping[str, np.ndarray]) -> tuple[Any, Any]:
        """Polygraphy's network and config loaders for this build (nothing is built yet)."""
        poly_trt, plan = self._trt, self.plan
        disabled = self.spec.disabled_build_options
        if plan.strongly_typed:
            tactics = tactic_options(disabled, self._tensorrt)
            return poly_trt.NetworkFromOnnxPath(str(self.path), strongly_typed=True), poly_trt.CreateConfig(**tactics)
        calibrator = poly_trt.Calibrator([dict(feeds)]) if plan.int8 else None
        config = poly_trt.CreateConfig(**config_options(plan, disabled, self._tensorrt), calibrator=calibrator)
        return poly_trt.NetworkFromOnnxPath(str(self.path)), config

    def _build(self, feeds: Mapping[str, np.ndarray]) -> Any:
        network, config = self.loaders(feeds)
        engine = self._trt.EngineFromNetwork(network, config=config)
        return self._trt.TrtRunner(engine)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._runner is None:
            self._runner = self._build(feeds)
            self._runner.activate()
        outputs = self._runner.infer(dict(feeds))
        return {name: np.asarray(value) for name, value in outputs.items()}

"""TensorRT 10 (builder precision flags) and TensorRT 11 (strongly typed networks only: the fp16
model is converted in ONNX first; bf16 and int8 refused with a reason), without a GPU: a stand-in
``tensorrt`` module names the version; Polygraphy's loaders are built but nothing is compiled."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest

from checks.mixed_precision import KEEP_FP32_KEY
from checks.runtimes import RuntimeUnavailableError
from checks.runtimes.tensorrt import BuildPlan, TensorRTRunner, build_plan, tensorrt_major
from checks.spec import RuntimeSpec
from tests.checks.models import overflow_model

pytest.importorskip("polygraphy")
FEEDS = {"x": np.random.default_rng(0).random((1, 16), dtype=np.float32)}


@pytest.fixture
def tensorrt_version(monkeypatch: pytest.MonkeyPatch) -> type[str]:
    """Call it with a version: a stand-in ``tensorrt`` module of that version is imported from then
    on (also where the real one is installed: the test must not depend on the GPU's version)."""

    class Install(str):
        def __new__(cls, version: str) -> Install:
            module = types.ModuleType("tensorrt")
            module.__version__ = version  # type: ignore[attr-defined]
            if tensorrt_major(version) < 11:  # TensorRT 11 removed the calibrators
                for name in ("IInt8Calibrator", "IInt8EntropyCalibrator2", "IInt8LegacyCalibrator"):
                    setattr(module, name, type(name, (), {}))
                algos = ("MINMAX_CALIBRATION", "ENTROPY_CALIBRATION_2", "LEGACY_CALIBRATION")
                module.CalibrationAlgoType = types.SimpleNamespace(**{a: a for a in algos})  # type: ignore[attr-defined]
            monkeypatch.setitem(sys.modules, "tensorrt", module)
            return super().__new__(cls, version)

    return Install


def test_the_major_is_read_from_the_version() -> None:
    assert tensorrt_major("10.8.0.43") == 10
    assert tensorrt_major("11.0.0") == 11
    assert tensorrt_major("") == 0


@pytest.mark.parametrize(
    ("precision", "major", "plan"),
    [
        ("fp32", 10, BuildPlan(convert_to_fp16=False, strongly_typed=False)),
        ("fp16", 10, BuildPlan(convert_to_fp16=False, strongly_typed=False, fp16=True)),
        ("bf16", 10, BuildPlan(convert_to_fp16=False, strongly_typed=False, bf16=True)),
        ("int8", 10, BuildPlan(convert_to_fp16=False, strongly_typed=False, int8=True)),
        ("fp32", 11, BuildPlan(convert_to_fp16=False, strongly_typed=True)),
        ("fp16", 11, BuildPlan(convert_to_fp16=True, strongly_typed=True)),
        ("fp16", 12, BuildPlan(convert_to_fp16=True, strongly_typed=True)),
    ],
)
def test_build_plans(precision: str, major: int, plan: BuildPlan) -> None:
    assert build_plan(precision, major) == plan


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_tensorrt_11_refuses_what_needs_builder_flags_and_says_why(precision: str) -> None:
    with pytest.raises(RuntimeUnavailableError, match=f"strongly typed.*precision {precision}.*TensorRT 10"):
        build_plan(precision, 11)


def _saved(tmp_path: Path) -> onnx.ModelProto:
    return onnx.load(str(tmp_path / "trt_candidate.onnx"))


def _float16_initializers(model: onnx.ModelProto) -> set[str]:
    return {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16}


def test_tensorrt_10_builds_the_model_as_it_is_with_the_fp16_flag(tmp_path: Path, tensorrt_version: type[str]) -> None:
    tensorrt_version("10.8.0.43")
    runner = TensorRTRunner(RuntimeSpec(runtime="tensorrt", precision="fp16"), overflow_model(), tmp_path)
    network, config = runner.loaders(FEEDS)
    assert not network.strongly_typed
    assert (config.fp16, config.bf16, config.int8, config.calibrator) == (True, False, False, None)
    assert _saved(tmp_path) == overflow_model()


def test_tensorrt_10_calibrates_int8_on_the_checks_inputs(tmp_path: Path, tensorrt_version: type[str]) -> None:
    tensorrt_version("10.3.0")
    runner = TensorRTRunner(RuntimeSpec(runtime="tensorrt", precision="int8"), overflow_model(), tmp_path)
    _, config = runner.loaders(FEEDS)
    assert config.int8 and not config.fp16 and config.calibrator is not None


def test_tensorrt_11_builds_the_fp16_model_converted_in_onnx_strongly_typed(
    tmp_path: Path, tensorrt_version: type[str]
) -> None:
    tensorrt_version("11.0.0")
    model = overflow_model()
    model.metadata_props.add(key=KEEP_FP32_KEY, value=json.dumps(["overflow"]))
    runner = TensorRTRunner(RuntimeSpec(runtime="tensorrt", precision="fp16"), model, tmp_path)
    network, config = runner.loaders(FEEDS)
    assert network.strongly_typed is True
    assert (config.fp16, config.bf16, config.int8, config.calibrator) == (False, False, False, None)
    saved = _saved(tmp_path)
    # converted as `precision` writes it: weights fp16 except the kept node's, inputs/outputs fp32
    assert _float16_initializers(saved) >= {"k400", "k1000", "one"}
    assert "k200" not in _float16_initializers(saved)  # read by "overflow", kept in fp32
    io = [*saved.graph.input, *saved.graph.output]
    assert {v.type.tensor_type.elem_type for v in io} == {onnx.TensorProto.FLOAT}


def test_tensorrt_11_builds_fp32_strongly_typed_from_the_model_as_it_is(
    tmp_path: Path, tensorrt_version: type[str]
) -> None:
    tensorrt_version("11.1.0")
    runner = TensorRTRunner(RuntimeSpec(runtime="tensorrt", precision="fp32"), overflow_model(), tmp_path)
    network, _ = runner.loaders(FEEDS)
    assert network.strongly_typed is True
    assert _saved(tmp_path) == overflow_model()


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_tensorrt_11_refuses_bf16_and_int8_before_saving_anything(
    tmp_path: Path, tensorrt_version: type[str], precision: str
) -> None:
    tensorrt_version("11.0.0")
    with pytest.raises(RuntimeUnavailableError, match="strongly typed"):
        TensorRTRunner(RuntimeSpec(runtime="tensorrt", precision=precision), overflow_model(), tmp_path)
    assert not (tmp_path / "trt_candidate.onnx").exists()

"""Pass bisection on TensorRT: the candidates are the builder flags this build sets and the tactic
sources the builder enables by default; a probe's build leaves the disabled ones out. Without a
GPU a stand-in ``tensorrt`` module (as in test_tensorrt_versions) gives the version, the tactic
sources and the builder's default mask; Polygraphy's config loader is built, nothing compiled.
The last test runs the whole search on a real TensorRT (GPU workers)."""

from __future__ import annotations

import enum
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest

from checks.pass_candidates import tensorrt_candidates
from checks.runtimes.tensorrt import TensorRTRunner, build_plan, config_options, default_tactic_sources
from checks.spec import RuntimeSpec, parse_check_spec
from reducer_core.pass_bisect import Outcome, PassCandidate
from tests.checks.models import overflow_model

pytest.importorskip("polygraphy")
FEEDS = {"x": np.random.default_rng(0).random((1, 16), dtype=np.float32)}


class TacticSource(enum.IntEnum):  # TensorRT 10's bit positions
    CUBLAS = 0
    CUBLAS_LT = 1
    CUDNN = 2
    EDGE_MASK_CONVOLUTIONS = 3
    JIT_CONVOLUTIONS = 4


def _stand_in(version: str) -> types.ModuleType:
    """A ``tensorrt`` whose fresh builder config enables EDGE_MASK and JIT convolutions (TensorRT
    10's default: cuBLAS and cuDNN off)."""
    module = types.ModuleType("tensorrt")
    module.__version__ = version  # type: ignore[attr-defined]
    module.TacticSource = TacticSource  # type: ignore[attr-defined]
    mask = (1 << TacticSource.EDGE_MASK_CONVOLUTIONS) | (1 << TacticSource.JIT_CONVOLUTIONS)
    config = types.SimpleNamespace(get_tactic_sources=lambda: mask)
    builder = types.SimpleNamespace(create_builder_config=lambda: config)
    module.Builder = lambda logger: builder  # type: ignore[attr-defined]
    module.Logger = type("Logger", (), {"WARNING": 2, "__init__": lambda self, level: None})  # type: ignore[attr-defined]
    return module


@pytest.fixture
def trt(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = _stand_in("10.8.0.43")
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    return module


def test_the_candidates_are_the_fp16_flag_and_the_default_tactic_sources(trt: types.ModuleType) -> None:
    assert default_tactic_sources(trt) == ["EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"]
    fp16 = RuntimeSpec(runtime="tensorrt", precision="fp16")
    assert tensorrt_candidates(fp16, build_plan("fp16", 10).fp16, trt) == [
        PassCandidate("FP16", "flag"),
        PassCandidate("EDGE_MASK_CONVOLUTIONS", "tactic"),
        PassCandidate("JIT_CONVOLUTIONS", "tactic"),
    ]
    fp32 = RuntimeSpec(runtime="tensorrt", disabled_build_options=("JIT_CONVOLUTIONS",))
    assert tensorrt_candidates(fp32, build_plan("fp32", 10).fp16, trt) == [
        PassCandidate("EDGE_MASK_CONVOLUTIONS", "tactic")
    ]
    assert tensorrt_candidates(fp16, build_plan("fp16", 11).fp16, trt)[0].name != "FP16"  # strongly typed: no flag


def test_a_probe_build_leaves_the_disabled_flag_and_tactic_source_out(trt: types.ModuleType, tmp_path: Path) -> None:
    plan = build_plan("fp16", 10)
    assert config_options(plan, (), trt) == {"fp16": True, "bf16": False, "int8": False}
    options = config_options(plan, ("EDGE_MASK_CONVOLUTIONS", "FP16"), trt)
    assert options["fp16"] is False
    assert options["tactic_sources"] == [TacticSource.JIT_CONVOLUTIONS]
    spec = RuntimeSpec(runtime="tensorrt", precision="fp16", disabled_build_options=("FP16", "JIT_CONVOLUTIONS"))
    _, config = TensorRTRunner(spec, overflow_model(), tmp_path).loaders(FEEDS)
    assert config.fp16 is False and config.tactic_sources == [TacticSource.EDGE_MASK_CONVOLUTIONS]


def test_a_strongly_typed_build_takes_the_tactic_sources_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", _stand_in("11.0.0"))
    spec = RuntimeSpec(runtime="tensorrt", precision="fp16", disabled_build_options=("EDGE_MASK_CONVOLUTIONS",))
    network, config = TensorRTRunner(spec, overflow_model(), tmp_path).loaders(FEEDS)
    assert network.strongly_typed and config.tactic_sources == [TacticSource.JIT_CONVOLUTIONS]


def test_the_spec_keeps_the_disabled_build_options_in_its_identity() -> None:
    spec = parse_check_spec("kind: error\ntarget: {runtime: tensorrt, disabled_build_options: [FP16, CUDNN]}\n")
    assert spec.target is not None and spec.target.disabled_build_options == ("CUDNN", "FP16")
    assert '"disabled_build_options":["CUDNN","FP16"]' in spec.identity


@pytest.mark.gpu
def test_on_a_real_tensorrt_the_fp16_overflow_is_the_fp16_flag(tmp_path: Path) -> None:
    pytest.importorskip("tensorrt")
    from engine.pass_bisect import bisect_passes

    onnx.save(overflow_model(), str(tmp_path / "model.onnx"))
    spec = parse_check_spec(
        "kind: compare\ntarget: {runtime: tensorrt, precision: fp16}\ntolerance: {atol: 0.001, rtol: 0.001}"
    )
    answer = bisect_passes(spec, tmp_path / "model.onnx")
    if answer.candidates and answer.candidates[0].name != "FP16":  # TensorRT 11: strongly typed, no flag
        pytest.skip("a strongly typed TensorRT has no FP16 flag to bisect")
    assert answer.outcome is Outcome.OPTIMIZERS and answer.optimizers == ["FP16"] and answer.verified

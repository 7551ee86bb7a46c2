"""Fallback inference runs the (untrusted) model on onnxruntime in a child process: a crash or a
hang there is a warning, and the reduction goes on without fallback shapes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import checks.ort_runtime
from checks.ort_runtime import FallbackInferenceError, fallback_inference, isolated_fallback_inference
from engine.workspace import ReduceOptions, Workspace, load_workspace
from reducer_cli.main import run
from reducer_core import modelio
from tests.checks.conftest import OP_PRESENT_MUL


class RecordingLog:
    def __init__(self) -> None:
        self.infos: list[str] = []
        self.warnings: list[str] = []

    def info(self, message: str) -> None:
        self.infos.append(message)

    def warning(self, message: str) -> None:
        self.warnings.append(message)


def _model(path: Path) -> Path:
    """x -> Relu -> MatMul(W 16x16, 1 KiB: moved to a weights file) -> Mul -> Neg -> y."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("MatMul", ["a", "W"], ["b"], name="matmul"),
        helper.make_node("Mul", ["b", "b"], ["c"], name="mul"),
        helper.make_node("Neg", ["c"], ["y"], name="neg"),
    ]
    weight = onnx.numpy_helper.from_array(np.full((16, 16), 0.5, np.float32), "W")
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def _workspace(tmp_path: Path) -> tuple[RecordingLog, Workspace]:
    log = RecordingLog()
    options = ReduceOptions(_model(tmp_path / "model.onnx"), tmp_path / "work", force_fallback_shape_inference=True)
    return log, load_workspace(options, log)


def test_the_isolated_run_gives_what_the_in_process_run_gives(tmp_path: Path) -> None:
    model, sources = modelio.load_model(_model(tmp_path / "model.onnx"))
    metas, values = isolated_fallback_inference(model, sources, work_dir=tmp_path)
    expected_metas, expected = fallback_inference(model, sources)
    assert metas == expected_metas
    assert sorted(values) == sorted(expected) == ["a", "b", "c", "x", "y"]
    for name, value in expected.items():
        np.testing.assert_array_equal(values[name], value)
    assert list(tmp_path.iterdir()) == [tmp_path / "model.onnx"], "the private folder is removed"


def test_onnxruntime_never_runs_in_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("onnxruntime ran the untrusted model in the reducing process")

    monkeypatch.setattr(onnxruntime, "InferenceSession", refuse)
    log, workspace = _workspace(tmp_path)
    assert not log.warnings
    assert workspace.values["c"].shape == (2, 16)
    workspace.close()


@pytest.mark.parametrize(("entry", "what"), [("segfault", "crash signal=SIGSEGV"), ("hang", "timeout")])
def test_a_crashing_or_hanging_fallback_child_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, what: str
) -> None:
    monkeypatch.setattr(checks.ort_runtime, "FALLBACK_ENTRY", f"tests.checks.helpers:{entry}")
    monkeypatch.setattr(checks.ort_runtime, "FALLBACK_TIMEOUT_S", 2.0)
    with pytest.raises(FallbackInferenceError, match=what):
        model, sources = modelio.load_model(_model(tmp_path / "model.onnx"))
        isolated_fallback_inference(model, sources)
    log, workspace = _workspace(tmp_path)
    assert any("Fallback inference failed" in w and what in w for w in log.warnings), log.warnings
    assert "c" not in workspace.values
    workspace.close()


def test_the_reduction_goes_on_when_the_fallback_child_crashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(checks.ort_runtime, "FALLBACK_ENTRY", "tests.checks.helpers:segfault")
    monkeypatch.chdir(tmp_path)
    _model(tmp_path / "model.onnx")
    (tmp_path / "spec.yaml").write_text(OP_PRESENT_MUL)
    args = ["reduce", "model.onnx", "-o", "min.onnx", "--check-spec", "spec.yaml", "--summary-json", "s.json"]
    code = run([*args, "--force-fallback-shape-inference", "--no-progress"])
    log = capsys.readouterr().err
    assert code == 0, log
    assert "Fallback inference failed (FallbackInferenceError: crash signal=SIGSEGV" in log
    assert json.loads((tmp_path / "s.json").read_text())["min_bad_nodes"] == ["Mul:mul"]

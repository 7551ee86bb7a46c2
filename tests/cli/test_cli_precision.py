"""``onnx-reducer precision``: the fewest nodes that must stay fp32 for the fp16 model to pass a
compare spec, on models built here whose fp16 overflow needs exactly those nodes in fp32 (real
checks: onnxruntime in child processes, the CPU provider's fp16 storage)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto

from reducer_cli.main import run
from tests.precision_models import COMPARE_FP16, gather_fails_anyway, one_node_overflows, two_nodes_overflow


def precision(model: onnx.ModelProto, *options: str, spec: str = COMPARE_FP16) -> int:
    onnx.save(model, "model.onnx")
    Path("spec.yaml").write_text(spec)
    argv = ["precision", "model.onnx", "-o", "mixed.onnx", "--check-spec", "spec.yaml", "--no-progress"]
    return run([*argv, *options])


def outputs(path: str, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, {"x": x})]


def test_one_overflowing_node_is_the_answer(in_tmp: Path, capsys: object) -> None:
    assert precision(one_node_overflows(), "--summary-json", "summary.json") == 0
    summary = json.loads(Path("summary.json").read_text())
    assert summary["keep_fp32"] == ["scale_up"]
    assert summary["fp16_verdict"]["kind"] == "fail"
    assert summary["checks_run"] == len([i for i in summary["iterations"] if not i["cached"]])
    assert [i["phase"] for i in summary["iterations"][:2]] == ["original", "range"]
    assert capsys.readouterr().out.split() == ["scale_up"]  # type: ignore[attr-defined]
    # the mixed model is fp16 but for that node, and computes what the fp32 model does
    mixed = onnx.load("mixed.onnx")
    assert any(t.data_type == TensorProto.FLOAT16 for t in mixed.graph.initializer)
    x = np.random.default_rng(0).uniform(70, 100, (2, 3)).astype(np.float32)
    for got, want in zip(outputs("mixed.onnx", x), outputs("model.onnx", x), strict=True):
        np.testing.assert_allclose(got, want, rtol=0.01, atol=0.01)


def test_two_nodes_that_must_stay_fp32_are_both_the_answer(in_tmp: Path) -> None:
    assert precision(two_nodes_overflow(), "--summary-json", "summary.json") == 0
    assert json.loads(Path("summary.json").read_text())["keep_fp32"] == ["scale_up", "scale_down"]


def test_a_resumed_search_checks_nothing_again(in_tmp: Path) -> None:
    assert precision(two_nodes_overflow(), "--save-debug-replay", "replay.json") == 0
    options = ("--load-debug-replay", "replay.json", "--summary-json", "summary.json")
    assert precision(two_nodes_overflow(), *options) == 0
    summary = json.loads(Path("summary.json").read_text())
    assert summary["keep_fp32"] == ["scale_up", "scale_down"]
    assert summary["checks_run"] == 0 and all(i["cached"] for i in summary["iterations"])


def test_an_fp16_model_that_passes_needs_no_fp32_node(in_tmp: Path) -> None:
    spec = COMPARE_FP16.replace("input_range: [70, 100]", "input_range: [0, 1]")
    assert precision(one_node_overflows(), "--summary-json", "summary.json", spec=spec) == 0
    summary = json.loads(Path("summary.json").read_text())
    assert summary["keep_fp32"] == [] and summary["fp16_already_passes"] is True
    assert summary["checks_run"] == 1


def test_a_failure_with_every_node_in_fp32_is_not_a_precision_problem(in_tmp: Path, capsys: object) -> None:
    spec = "kind: error\ntarget: {runtime: onnxruntime, precision: fp16}\n"
    assert precision(gather_fails_anyway(), spec=spec) == 3
    assert "not a precision problem" in capsys.readouterr().err  # type: ignore[attr-defined]


def test_a_spec_without_an_fp16_target_is_refused_with_what_to_give(in_tmp: Path, capsys: object) -> None:
    assert precision(one_node_overflows(), spec="kind: op-present\nops: [Mul]\n") == 2
    assert "target {runtime: onnxruntime, precision: fp16}" in capsys.readouterr().err  # type: ignore[attr-defined]


def test_unnamed_nodes_are_answered_by_the_names_the_mixed_model_gives_them(in_tmp: Path) -> None:
    model = one_node_overflows()
    for node in model.graph.node:
        node.name = ""
    assert precision(model, "--summary-json", "summary.json") == 0
    (name,) = json.loads(Path("summary.json").read_text())["keep_fp32"]
    assert name == "Mul_1"
    assert name in [n.name for n in onnx.load("mixed.onnx").graph.node]

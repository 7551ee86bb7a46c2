"""The inputs of a check follow the candidate's smaller sizes (``reducer_core.data_reduction``):
golden inputs are cut to the model's input shape; checks whose inputs cannot shrink skip data
reduction (``engine.session.fixed_inputs``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from checks.command import CommandCheck
from checks.interactive import InteractiveCheck
from checks.kinds import feeds_for
from checks.spec import parse_check_spec
from engine.session import SessionCheck, fixed_inputs
from engine.workspace import ReduceOptions

COMPARE = "kind: compare\ntarget: {runtime: onnxruntime, precision: fp16}\n"
GOLDEN = "kind: golden\ntarget: {runtime: onnxruntime, precision: fp16}\n"


def _model(seq: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, 4])],
    )
    return helper.make_model(graph)


def test_golden_inputs_are_cut_to_the_smaller_input() -> None:
    golden = {"x": np.arange(1 * 8 * 4, dtype=np.float32).reshape(1, 8, 4)}
    feeds, generated = feeds_for(_model(3), parse_check_spec(COMPARE), golden)
    assert generated == []
    np.testing.assert_array_equal(feeds["x"], golden["x"][:, :3, :])
    same, _ = feeds_for(_model(8), parse_check_spec(COMPARE), golden)
    np.testing.assert_array_equal(same["x"], golden["x"])


def test_checks_with_fixed_inputs_skip_data_reduction(tmp_path: Path) -> None:
    options = ReduceOptions(model=tmp_path / "m.onnx", work_dir=tmp_path)
    command = SessionCheck(CommandCheck(command=["true"]))
    assert fixed_inputs(command, options) is None
    with_inputs = ReduceOptions(model=tmp_path / "m.onnx", work_dir=tmp_path, load_inputs=[tmp_path / "i.json"])
    assert "--load-inputs" in (fixed_inputs(command, with_inputs) or "")
    golden = SessionCheck(CommandCheck(command=["true"]), parse_check_spec(GOLDEN), golden_sha256="0")
    assert "golden" in (fixed_inputs(golden, options) or "")
    compare = SessionCheck(CommandCheck(command=["true"]), parse_check_spec(COMPARE))
    assert fixed_inputs(compare, with_inputs) is None  # a spec generates its own inputs
    assert fixed_inputs(SessionCheck(InteractiveCheck("m.onnx")), options) is not None

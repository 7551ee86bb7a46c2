"""An fp16 check of a model whose weights fp16 cannot hold reports the clamping in one line, not
one onnxconverter-common warning per weight."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from checks.build import build_check
from checks.spec import parse_check_spec

SPEC = "kind: compare\ntarget: {precision: fp16}\ntolerance: {atol: 1000, rtol: 1000}\n"


def _model_with_unrepresentable_weights(count: int) -> onnx.ModelProto:
    nodes, inits, current = [], [], "x"
    for i in range(count):
        value = 1e-9 * (i + 1) if i % 2 else 1e5 * (i + 1)  # below fp16's smallest, above its largest
        inits.append(numpy_helper.from_array(np.full((2,), value, np.float32), f"w{i}"))
        out = "y" if i == count - 1 else f"t{i}"
        nodes.append(helper.make_node("Add", [current, f"w{i}"], [out], name=f"add{i}"))
        current = out
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_clamping_warnings_are_summarised_once(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(_model_with_unrepresentable_weights(10), str(path))
    _, output = build_check(parse_check_spec(SPEC)).run(path)
    assert output.count("will be truncated to") == 1, output
    assert "10 weight value(s) outside fp16's range were clamped" in output

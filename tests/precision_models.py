"""Models whose fp16 conversion overflows in a known place, for ``precision`` tests (built here;
no model files are committed)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from tests.models import IR_VERSION, OPSET

FLOAT = TensorProto.FLOAT
# Inputs in [70, 100]: x * 1000 is beyond fp16's largest value (65504), x itself is not.
COMPARE_FP16 = """
kind: compare
reference: {runtime: onnxruntime}
target: {runtime: onnxruntime, precision: fp16}
tolerance: {atol: 0.01, rtol: 0.01}
input_range: [70, 100]
"""


def make_model(nodes: list[onnx.NodeProto], outputs: list[str]) -> onnx.ModelProto:
    constants = [helper.make_tensor("big", FLOAT, [], [1000.0]), helper.make_tensor("one", FLOAT, [], [1.0])]
    graph = helper.make_graph(
        nodes,
        "precision",
        [helper.make_tensor_value_info("x", FLOAT, [2, 3])],
        [helper.make_tensor_value_info(name, FLOAT, [2, 3]) for name in outputs],
        initializer=constants,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def one_node_overflows() -> onnx.ModelProto:
    """``scale_up`` writes an output beyond fp16's range; the other branch is harmless."""
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Mul", ["a", "big"], ["y"], name="scale_up"),
            helper.make_node("Add", ["a", "one"], ["b"], name="add_one"),
            helper.make_node("Neg", ["b"], ["z"], name="negate"),
        ],
        ["y", "z"],
    )


def two_nodes_overflow() -> onnx.ModelProto:
    """A Mul beyond fp16's range, then a Div back: the tensor between them overflows, so both its
    writer and its reader must stay fp32."""
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Mul", ["a", "big"], ["h"], name="scale_up"),
            helper.make_node("Div", ["h", "big"], ["y"], name="scale_down"),
            helper.make_node("Add", ["y", "one"], ["b"], name="add_one"),
            helper.make_node("Neg", ["b"], ["z"], name="negate"),
        ],
        ["z"],
    )


def gather_fails_anyway() -> onnx.ModelProto:
    """A Gather of row 5 of a 2x3 input: a runtime error in any precision (an ``error`` check fails
    with every node in fp32 too), in a model the checker accepts."""
    model = make_model([helper.make_node("Gather", ["x", "row"], ["y"], name="bad_gather")], ["y"])
    model.graph.initializer.append(helper.make_tensor("row", TensorProto.INT64, [1], [5]))
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1
    return model

"""Build the example model of Polygraphy's `debug reduce` example: a small graph with one Mul.

    x0 -> Identity -> Add(., x1) -> Mul(., x2) -> Sub(., x3) -> Identity -> y
                     (ONNX opset 13, float32 [1, 1, 2, 2] tensors)

Usage: python examples/build_example_model.py [OUTPUT]   (default: examples/model.onnx)
"""

from __future__ import annotations

import sys

import onnx
from onnx import TensorProto, helper


def build_example_model() -> onnx.ModelProto:
    shape = [1, 1, 2, 2]
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, shape) for i in range(4)]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    nodes = [
        helper.make_node("Identity", ["x0"], ["id0_out"], name="onnx_graphsurgeon_node_1"),
        helper.make_node("Add", ["id0_out", "x1"], ["add_out"], name="onnx_graphsurgeon_node_3"),
        helper.make_node("Mul", ["add_out", "x2"], ["mul_out"], name="onnx_graphsurgeon_node_5"),
        helper.make_node("Sub", ["mul_out", "x3"], ["sub_out"], name="onnx_graphsurgeon_node_7"),
        helper.make_node("Identity", ["sub_out"], ["y"], name="onnx_graphsurgeon_node_9"),
    ]
    graph = helper.make_graph(nodes, "onnx_graphsurgeon_graph", inputs, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="onnx-reducer example")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else "examples/model.onnx"
    onnx.save(build_example_model(), path)
    print(f"wrote {path}")

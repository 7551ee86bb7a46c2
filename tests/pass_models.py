"""Models for pass bisection (``bisect-passes``), built in code: each graph is one that
onnxruntime's graph transformers change in known ways, and specs whose failure is one fusion's
output in the graph onnxruntime optimized (``op-present`` with a ``target``)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# onnxruntime changes ``fusion_model`` with three transformers: the Identity goes
# (Level1_RuleBasedTransformer, basic), Transpose+MatMul become FusedMatMul (MatmulTransposeFusion,
# extended) and the Div/Erf/Add/Mul/Mul pattern becomes Gelu (GeluFusionL2, extended).
FUSED_MATMUL_FUSION = "MatmulTransposeFusion"
GELU_FUSION = "GeluFusionL2"


def fusion_model() -> onnx.ModelProto:
    def constant(name: str, value: float) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(value, dtype=np.float32), name)

    nodes = [
        helper.make_node("Identity", ["x"], ["x_same"], name="identity"),
        helper.make_node("Transpose", ["x_same"], ["x_t"], perm=[0, 2, 1], name="transpose"),
        helper.make_node("MatMul", ["x_t", "b"], ["y"], name="matmul"),
        helper.make_node("Div", ["y", "sqrt2"], ["scaled"], name="gelu_div"),
        helper.make_node("Erf", ["scaled"], ["erf"], name="gelu_erf"),
        helper.make_node("Add", ["erf", "one"], ["shifted"], name="gelu_add"),
        helper.make_node("Mul", ["y", "shifted"], ["product"], name="gelu_mul"),
        helper.make_node("Mul", ["product", "half"], ["out"], name="gelu_half"),
    ]
    graph = helper.make_graph(
        nodes,
        "fusions",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 8, 4]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4, 4])],
        [constant("sqrt2", 1.4142135), constant("one", 1.0), constant("half", 0.5)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def optimized_op_spec(*ops: str, optimization: str = "all") -> str:
    """A check failing when one of ``ops`` is in the graph onnxruntime optimized at that level."""
    return (
        f"kind: op-present\nops: [{', '.join(ops)}]\ntarget: {{runtime: onnxruntime, optimization: {optimization}}}\n"
    )

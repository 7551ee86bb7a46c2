"""Models with planted faults for the check tests, built in code (never committed as files)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


def _const(name: str, value: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype=np.float32), name)


def overflow_model(width: int = 16) -> onnx.ModelProto:
    """x -> Relu -> Mul(*400) -> Mul(*200) [overflow: up to 80000 > 65504] -> Div(/1000) -> Add(+1) -> Relu -> y

    With model inputs in [0, 1) the third node's output exceeds fp16's range; fed fresh random
    [0, 1) values instead of the ones it sees inside the model, that node alone stays in range."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r0"], name="relu_in"),
        helper.make_node("Mul", ["r0", "k400"], ["s"], name="scale_up"),
        helper.make_node("Mul", ["s", "k200"], ["p"], name="overflow"),
        helper.make_node("Div", ["p", "k1000"], ["q"], name="scale_down"),
        helper.make_node("Add", ["q", "one"], ["a"], name="shift"),
        helper.make_node("Relu", ["a"], ["y"], name="relu_out"),
    ]
    inits = [_const("k400", 400.0), _const("k200", 200.0), _const("k1000", 1000.0), _const("one", 1.0)]
    return _model(nodes, inits, width)


def chain_model(length: int, fault_at: int, width: int = 16, residual_every: int = 0) -> onnx.ModelProto:
    """A chain of ``length`` benign nodes (Relu, Add, Mul by values near 1, optional residual
    Adds every ``residual_every`` nodes) with an fp16 overflow planted at node ``fault_at``: two
    Muls by 400 (weights stay inside the converter's clamp of 1e4) take values near 1 above 65504,
    and a Mul by 1/160000 right after brings them back."""
    nodes: list[onnx.NodeProto] = []
    inits = [_const("big", 400.0), _const("small", 1 / 160000), _const("half", 0.5), _const("tiny", 0.01)]
    current, anchor = "x", "x"
    for i in range(length):
        out = f"t{i}"
        if i == fault_at - 1:
            nodes.append(helper.make_node("Mul", [current, "big"], [out], name=f"n{i}_scale"))
        elif i == fault_at:
            nodes.append(helper.make_node("Mul", [current, "big"], [out], name=f"n{i}_overflow"))
        elif i == fault_at + 1:
            nodes.append(helper.make_node("Mul", [current, "small"], [out], name=f"n{i}_restore"))
        elif residual_every and i % residual_every == residual_every - 1 and anchor != current:
            nodes.append(helper.make_node("Add", [current, anchor], [f"{out}_sum"], name=f"n{i}_residual"))
            nodes.append(helper.make_node("Mul", [f"{out}_sum", "half"], [out], name=f"n{i}_halve"))
            anchor = out
        elif i % 2:
            nodes.append(helper.make_node("Relu", [current], [out], name=f"n{i}_relu"))
        else:
            nodes.append(helper.make_node("Add", [current, "tiny"], [out], name=f"n{i}_add"))
        current = out
    nodes.append(helper.make_node("Identity", [current], ["y"], name="out"))
    return _model(nodes, inits, width)


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], width: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "planted",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def matmul_overflow_model(width: int = 64, weight: float = 3000.0) -> onnx.ModelProto:
    """x[1, width] -> Relu -> MatMul(W: width x width, every entry ``weight``) -> Mul(1e-3) -> y.

    W is ``width * width * 4`` bytes (16 KiB by default): far above the 1 KB from which the
    workspace moves inline weights to a reference file hardlinked beside every iteration model.
    With inputs in [0, 1) the MatMul's outputs (about ``weight * width / 2``) exceed fp16's range."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu_in"),
        helper.make_node("MatMul", ["r", "W"], ["m"], name="matmul"),
        helper.make_node("Mul", ["m", "milli"], ["y"], name="scale_down"),
    ]
    w = numpy_helper.from_array(np.full((width, width), weight, dtype=np.float32), "W")
    return _model(nodes, [w, _const("milli", 1e-3)], width)


def conv_reshape_error_model() -> onnx.ModelProto:
    """x[1, 16] -> Reshape[1, 16, 1, 1] -> Conv(W: 16x16x1x1, 1 KiB) -> Reshape(to [7, 7]) -> y.

    The last Reshape cannot work (16 elements into 49): onnxruntime raises while running it."""
    nodes = [
        helper.make_node("Reshape", ["x", "nchw"], ["img"], name="to_nchw"),
        helper.make_node("Conv", ["img", "W"], ["c"], name="conv"),
        helper.make_node("Reshape", ["c", "bad_shape"], ["y"], name="bad_reshape"),
    ]
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array([1, 16, 1, 1], dtype=np.int64), "nchw"),
        numpy_helper.from_array(rng.uniform(-1, 1, (16, 16, 1, 1)).astype(np.float32), "W"),
        numpy_helper.from_array(np.array([7, 7], dtype=np.int64), "bad_shape"),
    ]
    graph = helper.make_graph(
        nodes,
        "planted_error",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [7, 7])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def lossy_overflow_model(width: int = 16) -> onnx.ModelProto:
    """x -> Relu -> Mul(*20) -> Add(+2000) -> Sub(-2000) [lossy] -> Mul(*8000) [overflow] -> Mul(1e-4) -> y

    Like a real export, the overflowing node's neighbours fail on their own as well: the lossy Sub
    (fp16 stores 2000 + v with a spacing of 1, so v comes back up to 0.5 off: beyond the tolerance
    alone, with golden inputs) feeds it, and its reader gets the overflowing tensor. The nodes
    before the Sub are within tolerance in fp16."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu_in"),
        helper.make_node("Mul", ["r", "k20"], ["v"], name="widen"),
        helper.make_node("Add", ["v", "k2000"], ["b"], name="offset"),
        helper.make_node("Sub", ["b", "k2000"], ["d"], name="lossy"),
        helper.make_node("Mul", ["d", "k8000"], ["p"], name="overflow"),
        helper.make_node("Mul", ["p", "k1e-4"], ["y"], name="scale_down"),
    ]
    inits = [_const("k20", 20.0), _const("k2000", 2000.0), _const("k8000", 8000.0), _const("k1e-4", 1e-4)]
    return _model(nodes, inits, width)

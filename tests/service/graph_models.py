"""Models for the graph drawing's browser tests and screenshots, built in code: a BERT-like encoder
(name scopes `/m/encoder/layer.N/attention/self/...`, about 42 nodes a layer) and a long chain."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN = 16
SEQ = 8


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.names: set[str] = set()
        self.count = 0

    def op(self, scope: str, op: str, inputs: list[str], **attrs: object) -> str:
        self.count += 1
        out = f"t{self.count}"
        name = f"/m/{scope}/{op}"
        if name in self.names:  # as exporters do: the second Add of a scope is Add_1...
            name = f"{name}_{self.count}"
        self.names.add(name)
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def layer_norm(self, scope: str, x: str) -> str:
        mean = self.op(scope, "ReduceMean", [x], axes=[-1])
        centred = self.op(scope, "Sub", [x, mean])
        square = self.op(scope, "Pow", [centred, "two"])
        var = self.op(scope, "ReduceMean", [square], axes=[-1])
        shifted = self.op(scope, "Add", [var, "eps"])
        std = self.op(scope, "Sqrt", [shifted])
        normed = self.op(scope, "Div", [centred, std])
        scaled = self.op(scope, "Mul", [normed, "gamma"])
        return self.op(scope, "Add", [scaled, "beta"])

    def dense(self, scope: str, x: str) -> str:
        return self.op(scope, "Add", [self.op(scope, "MatMul", [x, "w"]), "b"])


def transformer_model(layers: int = 24) -> onnx.ModelProto:
    """x -> embeddings -> ``layers`` encoder layers (self-attention, GELU feed-forward, two layer
    norms with residuals) -> y; 24 layers: 1,018 nodes."""
    b = _Builder()
    h = b.op("embeddings", "Add", ["x", "pos"])
    h = b.layer_norm("embeddings/LayerNorm", h)
    for i in range(layers):
        s = f"encoder/layer.{i}"
        q = b.dense(f"{s}/attention/self/query", h)
        k = b.dense(f"{s}/attention/self/key", h)
        v = b.dense(f"{s}/attention/self/value", h)
        kt = b.op(f"{s}/attention/self", "Transpose", [k], perm=[0, 2, 1])
        scores = b.op(f"{s}/attention/self", "Div", [b.op(f"{s}/attention/self", "MatMul", [q, kt]), "scale"])
        probs = b.op(f"{s}/attention/self", "Softmax", [scores], axis=-1)
        ctx = b.op(f"{s}/attention/self", "MatMul", [probs, v])
        att = b.op(f"{s}/attention/output", "Add", [b.dense(f"{s}/attention/output/dense", ctx), h])
        att = b.layer_norm(f"{s}/attention/output/LayerNorm", att)
        up = b.dense(f"{s}/intermediate/dense", att)
        act = f"{s}/intermediate/intermediate_act_fn"
        erf = b.op(act, "Erf", [b.op(act, "Div", [up, "sqrt2"])])
        gelu = b.op(act, "Mul", [b.op(act, "Mul", [up, b.op(act, "Add", [erf, "one"])]), "half"])
        out = b.op(f"{s}/output", "Add", [b.dense(f"{s}/output/dense", gelu), att])
        h = b.layer_norm(f"{s}/output/LayerNorm", out)
    b.nodes[-1].output[0] = "y"
    rng = np.random.default_rng(0)
    consts = {
        "pos": rng.standard_normal((1, SEQ, HIDDEN)),
        "w": rng.standard_normal((HIDDEN, HIDDEN)) * 0.1,
        "b": np.zeros(HIDDEN),
        "gamma": np.ones(HIDDEN),
        "beta": np.zeros(HIDDEN),
        "two": np.array(2.0),
        "eps": np.array(1e-5),
        "scale": np.array(4.0),
        "sqrt2": np.array(1.4142135),
        "one": np.array(1.0),
        "half": np.array(0.5),
    }
    graph = helper.make_graph(
        b.nodes,
        "encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def add_chain(length: int = 39) -> onnx.ModelProto:
    """x -> Add(·, c) ``length`` times -> y: an fp16 accumulation chain, names `/acc/Add_N`."""
    nodes, current = [], "x"
    for i in range(length):
        out = f"acc{i}" if i < length - 1 else "y"
        nodes.append(helper.make_node("Add", [current, "c"], [out], name=f"/acc/Add_{i}"))
        current = out
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 64])],
        [numpy_helper.from_array(np.full((1, 64), 0.1, np.float16), "c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model

"""The zoo's control-flow models (also built by tests/core and tests/cli): failures planted inside
Loop and If bodies. Every node, in and out of bodies, has a unique name, so a check can ask
whether a named body node is still present.

- ``loop30``   pre -> Loop (a 30-node body: a 29-node chain carried from iteration to iteration,
               one ``Erf`` culprit, the chain's middle as scan output) -> two post nodes.
- ``if20``     an If on a data-dependent flag, two 20-node branches, the culprit in one.
- ``nested2``  a Loop whose 11-node body holds an If (on the loop's condition) with two 10-node
               branches, the culprit in the then branch: nesting two deep.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
_OPS = ("Tanh", "Sigmoid", "Abs", "Neg", "Relu", "Softsign")


def _chain(prefix: str, source: str, length: int, culprit: int | None, culprit_op: str = "Erf") -> list[onnx.NodeProto]:
    """``length`` unary nodes in a line from ``source``; node ``culprit`` is ``culprit_op``."""
    nodes, current = [], source
    for k in range(length):
        op = culprit_op if k == culprit else _OPS[k % len(_OPS)]
        out = f"{prefix}_{k}"
        nodes.append(
            helper.make_node(op, [current], [out], name=f"{prefix}/{k}" if k != culprit else f"{prefix}/culprit")
        )
        current = out
    return nodes


def _value(name: str, elem: int, shape: list[int] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def loop_body(prefix: str, length: int, culprit: int | None, nested: onnx.NodeProto | None = None) -> onnx.GraphProto:
    """(i, cond, v) -> (cond, v', scan): a chain of ``length`` nodes from ``v`` (the last one's
    output carried), an ``Identity`` for the condition, and the chain's middle as scan output.
    ``nested``: a node inserted after the chain's first node (reads its output)."""
    nodes = _chain(prefix, "v", length - 1, culprit)
    if nested is not None:
        nodes.insert(1, nested)
    nodes.append(helper.make_node("Identity", ["cond_in"], [f"{prefix}_cond"], name=f"{prefix}/cond"))
    inputs = [_value("i", INT64, []), _value("cond_in", BOOL, []), _value("v", FLOAT, [2, 3])]
    last = nodes[-2].output[0]
    middle = f"{prefix}_{(length - 1) // 2}"
    outputs = [_value(f"{prefix}_cond", BOOL, []), _value(last, FLOAT, [2, 3]), _value(middle, FLOAT, [2, 3])]
    return helper.make_graph(nodes, prefix, inputs, outputs)


def _model(nodes: list[onnx.NodeProto], outputs: list[onnx.ValueInfoProto], name: str) -> onnx.ModelProto:
    inits = [
        numpy_helper.from_array(np.array(3, dtype=np.int64), "trip"),
        numpy_helper.from_array(np.array(True), "cond"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
    ]
    graph = helper.make_graph(nodes, name, [_value("x", FLOAT, [2, 3])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def loop_model(length: int = 30, culprit: int = 17) -> onnx.ModelProto:
    """pre (Relu) -> Loop (body of ``length`` nodes, one ``Erf`` culprit) -> post (Neg, Abs)."""
    body = loop_body("body", length, culprit)
    nodes = [
        helper.make_node("Relu", ["x"], ["pre"], name="pre"),
        helper.make_node("Loop", ["trip", "cond", "pre"], ["final", "scan"], name="loop", body=body),
        helper.make_node("Neg", ["final"], ["y"], name="post"),
        helper.make_node("Abs", ["scan"], ["z"], name="post_scan"),
    ]
    return _model(nodes, [_value("y", FLOAT, [2, 3]), _value("z", FLOAT, [3, 2, 3])], "loop30")


def _branch(prefix: str, length: int, culprit: int | None) -> onnx.GraphProto:
    nodes = _chain(prefix, "pre", length, culprit)
    return helper.make_graph(nodes, prefix, [], [_value(nodes[-1].output[0], FLOAT, [2, 3])])


def if_model(length: int = 20, culprit: int = 6) -> onnx.ModelProto:
    """pre -> flag (ReduceSum > 0) -> If (two ``length``-node branches, the culprit in the
    else branch) -> post."""
    nodes = [
        helper.make_node("Relu", ["x"], ["pre"], name="pre"),
        helper.make_node("ReduceSum", ["x"], ["total"], name="sum", keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["flag"], name="flag"),
        helper.make_node(
            "If",
            ["flag"],
            ["picked"],
            name="if",
            then_branch=_branch("then", length, None),
            else_branch=_branch("else", length, culprit),
        ),
        helper.make_node("Neg", ["picked"], ["y"], name="post"),
    ]
    return _model(nodes, [_value("y", FLOAT, [2, 3])], "if20")


def nested_model(length: int = 10, branch_length: int = 10, culprit: int = 4) -> onnx.ModelProto:
    """A Loop whose body holds an If (on the iteration number) whose then branch holds the
    culprit: nesting two deep."""
    inner_then = helper.make_graph(
        _chain("inner_then", "body_0", branch_length, culprit),
        "inner_then",
        [],
        [_value(f"inner_then_{branch_length - 1}", FLOAT, [2, 3])],
    )
    inner_else = helper.make_graph(
        _chain("inner_else", "body_0", branch_length, None),
        "inner_else",
        [],
        [_value(f"inner_else_{branch_length - 1}", FLOAT, [2, 3])],
    )
    nested = helper.make_node(
        "If", ["cond_in"], ["inner"], name="body/if", then_branch=inner_then, else_branch=inner_else
    )
    body = loop_body("body", length, None, nested)
    body.output.append(_value("inner", FLOAT, [2, 3]))
    nodes = [
        helper.make_node("Relu", ["x"], ["pre"], name="pre"),
        helper.make_node("Loop", ["trip", "cond", "pre"], ["final", "scan", "scan_inner"], name="loop", body=body),
        helper.make_node("Neg", ["final"], ["y"], name="post"),
        helper.make_node("Abs", ["scan_inner"], ["z"], name="post_scan"),
    ]
    return _model(nodes, [_value("y", FLOAT, [2, 3]), _value("z", FLOAT, [3, 2, 3])], "nested")


def node_names(model: onnx.ModelProto) -> set[str]:
    """Every node name of the model, in and out of bodies."""
    names: set[str] = set()
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            names.add(node.name)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.append(attr.g)
                stack.extend(attr.graphs)
    return names

"""Candidates of models with ``Loop`` and ``If`` nodes, built the way exporters (torch.onnx) emit
them: body inputs and outputs typed without shapes, scalars with an empty shape, loop-carried
values (one that grows every iteration), scan outputs, reads from the enclosing scope, an ``If``
nested in a ``Loop`` body and in a branch, and value_info without shapes for the outputs of
control-flow nodes. Every candidate must pass ``onnx.checker.check_model(full_check=True)``
wherever the original does, and load and run in onnxruntime: each single node, and random node
subsets."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from engine.workspace import ReduceOptions, load_workspace
from reducer_core.candidate import Candidate
from reducer_core.control_flow import complete_control_flow_shapes, has_shape
from reducer_core.extract import extract
from reducer_core.graph import GraphIndex
from tests.models import FLOAT, IR_VERSION, OPSET, index_of, random_feeds

INT64, BOOL = TensorProto.INT64, TensorProto.BOOL


def typed(name: str, elem_type: int, shape: list[int | str] | None = None) -> onnx.ValueInfoProto:
    """A value_info as exporters write them: ``shape=None`` gives an element type and no shape."""
    return helper.make_tensor_value_info(name, elem_type, shape)


def branch(name: str, nodes: list[onnx.NodeProto], outputs: list[onnx.ValueInfoProto]) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], outputs)


def loop_body() -> onnx.GraphProto:
    """(i, cond, carry, acc) -> (cond, carry', acc', scan): carry' = carry + w (``w`` read from the
    top-level scope), acc' = Concat(acc, carry') grows by two rows per iteration, scan = an If
    nested in the body, whose branches read ``w`` (two scopes up) and ``carry_out`` (one up)."""
    then_branch = branch(
        "then", [helper.make_node("Mul", ["carry_out", "w"], ["then_out"], name="then_mul")], [typed("then_out", FLOAT)]
    )
    else_branch = branch(
        "else", [helper.make_node("Sub", ["carry_out", "w"], ["else_out"], name="else_sub")], [typed("else_out", FLOAT)]
    )
    nodes = [
        helper.make_node("Add", ["carry", "w"], ["carry_out"], name="body_add"),
        helper.make_node("Concat", ["acc", "carry_out"], ["acc_out"], name="body_concat", axis=0),
        helper.make_node("Cast", ["i"], ["i_float"], name="body_cast", to=FLOAT),
        helper.make_node("Greater", ["i_float", "half"], ["odd"], name="body_greater"),
        helper.make_node("If", ["odd"], ["picked"], name="body_if", then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Relu", ["picked"], ["scan_out"], name="body_relu"),
        helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
    ]
    inputs = [typed("i", INT64, []), typed("cond_in", BOOL, []), typed("carry", FLOAT), typed("acc", FLOAT)]
    outputs = [
        typed("cond_out", BOOL, []),
        typed("carry_out", FLOAT),
        typed("acc_out", FLOAT),
        typed("scan_out", FLOAT),
    ]
    return helper.make_graph(nodes, "loop_body", inputs, outputs)


def exported_loop_model() -> onnx.ModelProto:
    """SIG -> w (read inside the body), NEG -> x0, LOOP(trip, cond, x0, x0) -> final, acc, scan,
    then a node after each Loop output; Loop outputs have value_info without shapes."""
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["w"], name="SIG"),
        helper.make_node("Neg", ["x"], ["x0"], name="NEG"),
        helper.make_node("Loop", ["trip", "cond", "x0", "x0"], ["final", "acc", "scan"], name="LOOP", body=loop_body()),
        helper.make_node("Abs", ["final"], ["y_final"], name="ABS"),
        helper.make_node("ReduceSum", ["acc"], ["y_acc"], name="SUM", keepdims=1),
        helper.make_node("Tanh", ["scan"], ["y_scan"], name="TANH"),
    ]
    initializers = [
        numpy_helper.from_array(np.array(3, dtype=np.int64), "trip"),
        numpy_helper.from_array(np.array(True), "cond"),
        numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half"),
    ]
    graph = helper.make_graph(
        nodes,
        "exported_loop",
        [typed("x", FLOAT, [2, 3])],
        [
            typed("y_final", FLOAT, ["d0", "d1"]),
            typed("y_acc", FLOAT, [1, 1]),
            typed("y_scan", FLOAT, ["s0", "s1", "s2"]),
        ],
        initializers,
        value_info=[typed(name, FLOAT) for name in ("final", "acc", "scan")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="pytorch")
    model.ir_version = IR_VERSION
    return model


def exported_if_model() -> onnx.ModelProto:
    """An If on a data-dependent condition; its branches read top-level tensors (``a``, ``b``);
    the then branch runs a Loop whose carried value is a branch output (ONNX inference gives it,
    and so the If's output, no shape), the else branch holds another If; the outputs have
    value_info without shapes."""
    inner_then = branch(
        "inner_then", [helper.make_node("Neg", ["b"], ["inner_t"], name="inner_neg")], [typed("inner_t", FLOAT)]
    )
    inner_else = branch(
        "inner_else", [helper.make_node("Abs", ["a"], ["inner_e"], name="inner_abs")], [typed("inner_e", FLOAT)]
    )
    steps = helper.make_graph(
        [
            helper.make_node("Add", ["state", "b"], ["state_out"], name="steps_add"),
            helper.make_node("Identity", ["go"], ["go_out"], name="steps_go"),
        ],
        "steps",
        [typed("n", INT64, []), typed("go", BOOL, []), typed("state", FLOAT)],
        [typed("go_out", BOOL, []), typed("state_out", FLOAT)],
    )
    then_branch = branch(
        "then",
        [
            helper.make_node("Loop", ["two", "", "a"], ["t0"], name="then_loop", body=steps),
            helper.make_node("Relu", ["a"], ["t1"], name="then_relu"),
        ],
        [typed("t0", FLOAT), typed("t1", FLOAT)],
    )
    else_branch = branch(
        "else",
        [
            helper.make_node("If", ["flag"], ["e0"], name="else_if", then_branch=inner_then, else_branch=inner_else),
            helper.make_node("Sigmoid", ["b"], ["e1"], name="else_sig"),
        ],
        [typed("e0", FLOAT), typed("e1", FLOAT)],
    )
    nodes = [
        helper.make_node("Tanh", ["x"], ["a"], name="TANH"),
        helper.make_node("Exp", ["x"], ["b"], name="EXP"),
        helper.make_node("ReduceSum", ["x"], ["total"], name="SUM", keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["flag"], name="GT"),
        helper.make_node("If", ["flag"], ["p", "q"], name="IF", then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Mul", ["p", "q"], ["y"], name="MUL"),
    ]
    graph = helper.make_graph(
        nodes,
        "exported_if",
        [typed("x", FLOAT, [2, 3])],
        [typed("y", FLOAT, ["d0", "d1"])],
        [numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"), numpy_helper.from_array(np.array(2), "two")],
        value_info=[typed("p", FLOAT), typed("q", FLOAT)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="pytorch")
    model.ir_version = IR_VERSION
    return model


MODELS = {"loop": exported_loop_model, "if": exported_if_model}


def assert_valid(model: onnx.ModelProto, run: bool = True) -> None:
    onnx.checker.check_model(model, full_check=True)
    if run:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        session.run(None, random_feeds(model))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_exported_models_pass_the_full_checker(name: str) -> None:
    assert_valid(MODELS[name]())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_single_node_and_pair_of_nodes_is_a_valid_model(name: str) -> None:
    index = index_of(MODELS[name]())
    for size in (1, 2):
        for nodes in itertools.combinations(range(len(index.nodes)), size):
            assert_valid(extract(index, Candidate(frozenset(nodes))))


@pytest.mark.parametrize("name", sorted(MODELS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_node_subsets_are_valid_models(name: str, data: st.DataObject) -> None:
    index = index_of(MODELS[name]())
    nodes = data.draw(st.sets(st.integers(0, len(index.nodes) - 1), min_size=1))
    assert_valid(extract(index, Candidate(frozenset(nodes))), run=False)


def test_loop_outputs_get_shapes_from_the_body() -> None:
    """final keeps x0's shape (one pass keeps it); acc grows, so its rows are unknown; scan gets
    an unknown iteration axis, and unknown dims because acc changes from pass to pass."""
    index = index_of(exported_loop_model())
    dims = {
        name: [d.dim_value if d.HasField("dim_value") else None for d in index.types[name].tensor_type.shape.dim]
        for name in ("final", "acc", "scan")
    }
    assert dims == {"final": [2, 3], "acc": [None, 3], "scan": [None, None, None]}


def test_if_outputs_get_the_shape_both_branches_agree_on() -> None:
    index = index_of(exported_if_model())
    for name in ("p", "q"):
        assert [d.dim_value for d in index.types[name].tensor_type.shape.dim] == [2, 3]


def _if_with_branches_of_different_ranks() -> onnx.ModelProto:
    """The then branch gives [2, 3], the else branch [6]: valid ONNX, but no rank to derive."""
    then_branch = branch("then", [helper.make_node("Relu", ["a"], ["t"], name="then_relu")], [typed("t", FLOAT)])
    flat = numpy_helper.from_array(np.array([6], dtype=np.int64), "flat")
    else_branch = branch(
        "else", [helper.make_node("Reshape", ["a", "flat"], ["e"], name="else_flat")], [typed("e", FLOAT)]
    )
    nodes = [
        helper.make_node("Tanh", ["x"], ["a"], name="TANH"),
        helper.make_node("ReduceSum", ["x"], ["total"], name="SUM", keepdims=0),
        helper.make_node("Greater", ["total", "low"], ["flag"], name="GT"),
        helper.make_node("If", ["flag"], ["picked"], name="IF", then_branch=then_branch, else_branch=else_branch),
        helper.make_node("ReduceSum", ["picked"], ["y"], name="TOTAL", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "ranks",
        [typed("x", FLOAT, [2, 3])],
        [typed("y", FLOAT, [])],
        [numpy_helper.from_array(np.array(-1e9, dtype=np.float32), "low"), flat],
        value_info=[typed("picked", FLOAT)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def test_what_the_bodies_cannot_settle_comes_from_fallback_inference(tmp_path: Path) -> None:
    """The If's output rank depends on the branch taken: the bodies cannot settle it, so one
    onnxruntime run (fallback inference) records the shape it saw, and the candidate made of
    the node after the If (whose input is that output) passes the full checker."""
    model = _if_with_branches_of_different_ranks()
    assert_valid(model)
    prepared = index_of(model)
    assert not has_shape(prepared.types["picked"])
    onnx.save(model, str(tmp_path / "model.onnx"))
    workspace = load_workspace(ReduceOptions(tmp_path / "model.onnx", tmp_path / "work"), _Quiet())
    try:
        index: GraphIndex = workspace.index
        assert [d.dim_value for d in index.types["picked"].tensor_type.shape.dim] == [2, 3]
        (total,) = [i for i, node in enumerate(index.nodes) if node.name == "TOTAL"]
        assert_valid(workspace.model_for(Candidate(frozenset({total}))))
    finally:
        workspace.close()


def test_completion_leaves_known_shapes_alone() -> None:
    model = onnx.shape_inference.infer_shapes(exported_if_model())
    for info in model.graph.value_info:
        if info.name in ("p", "q"):
            info.type.CopyFrom(helper.make_tensor_type_proto(FLOAT, [2, "k"]))
    assert complete_control_flow_shapes(model) == []


class _Quiet:
    def info(self, message: str) -> None:
        pass

    def warning(self, message: str) -> None:
        pass

"""Extraction validity: every candidate a strategy proposes becomes a model that passes the ONNX
checker and loads and runs in onnxruntime; boundary tensors become the right inputs/outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from checks.ort_runtime import max_ir_version
from reducer_core.candidate import Candidate
from reducer_core.extract import extract
from reducer_core.graph import GraphIndex
from reducer_core.strategies import MODES
from tests.models import (
    FLOAT,
    IR_VERSION,
    branchy_model,
    fails_with_all,
    index_of,
    make_model,
    names_in,
    random_feeds,
    reduce_with,
)


def run_in_ort(model: onnx.ModelProto) -> list[np.ndarray]:
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, random_feeds(model))


def by_names(index: GraphIndex, *names: str) -> Candidate:
    return Candidate(frozenset(i for i, node in enumerate(index.nodes) if node.name in names))


def constant_model() -> onnx.ModelProto:
    """A Constant node feeding a Mul, a Constant of ints, and an initializer."""
    scale = numpy_helper.from_array(np.full((2, 3), 2.0, dtype=np.float32), name="scale")
    bias = numpy_helper.from_array(np.ones((2, 3), dtype=np.float32), name="bias")
    nodes = [
        helper.make_node("Constant", [], ["k"], name="K", value=scale),
        helper.make_node("Relu", ["x"], ["r"], name="R"),
        helper.make_node("Mul", ["r", "k"], ["m"], name="M"),
        helper.make_node("Add", ["m", "bias"], ["y"], name="A"),
    ]
    return make_model(nodes, ["x"], ["y"], initializers=[bias])


def multi_output_model() -> onnx.ModelProto:
    """A Split whose two outputs are both graph outputs, one of them also read by a Relu."""
    split = numpy_helper.from_array(np.array([1, 1], dtype=np.int64), name="split")
    nodes = [
        helper.make_node("Neg", ["x"], ["n"], name="NEG"),
        helper.make_node("Split", ["n", "split"], ["s0", "s1"], name="SPLIT", axis=0),
        helper.make_node("Relu", ["s0"], ["r"], name="RELU"),
    ]
    graph = helper.make_graph(
        nodes,
        "multi",
        [helper.make_tensor_value_info("x", FLOAT, [2, 3])],
        [helper.make_tensor_value_info(name, FLOAT, [1, 3]) for name in ("s0", "s1", "r")],
        initializer=[split],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def if_model() -> onnx.ModelProto:
    """An If whose branches read ``a`` (produced at the top level) from the outer scope."""
    then_graph = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["then_out"], name="THEN_RELU")],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", FLOAT, [2, 3])],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["else_out"], name="ELSE_NEG")],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", FLOAT, [2, 3])],
    )
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["a"], name="SIG"),
        helper.make_node("ReduceSum", ["x"], ["total"], name="SUM", keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["cond"], name="GT"),
        helper.make_node("If", ["cond"], ["picked"], name="IF", then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Abs", ["picked"], ["y"], name="ABS"),
    ]
    zero = numpy_helper.from_array(np.array(0.0, dtype=np.float32), name="zero")
    return make_model(nodes, ["x"], ["y"], initializers=[zero])


def unsorted_model() -> onnx.ModelProto:
    """Nodes stored in reverse topological order (valid ONNX requires sorting; ours must cope)."""
    nodes = [
        helper.make_node("Tanh", ["b"], ["y"], name="LAST"),
        helper.make_node("Mul", ["a", "a"], ["b"], name="MIDDLE"),
        helper.make_node("Relu", ["x"], ["a"], name="FIRST"),
    ]
    graph = helper.make_graph(
        nodes,
        "unsorted",
        [helper.make_tensor_value_info("x", FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = IR_VERSION
    return model


MODELS = {
    "branchy": branchy_model,
    "constant": constant_model,
    "multi_output": multi_output_model,
    "if": if_model,
    "unsorted": unsorted_model,
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_every_proposed_candidate_extracts_to_a_valid_runnable_model(model_name: str, mode: str) -> None:
    index = index_of(MODELS[model_name]())
    names = [node.name for node in index.nodes]
    culprits = [names[len(names) // 2], names[-1]]
    _, checker, _ = reduce_with(index, fails_with_all(culprits), mode)
    assert len(checker.seen) > 1
    for candidate in checker.seen:
        model = extract(index, candidate, ir_version_cap=max_ir_version())
        run_in_ort(model)
        assert [n.name for n in model.graph.node] == [index.nodes[i].name for i in sorted(candidate.nodes)]


@pytest.mark.parametrize("size", [1, 2, 3])
def test_every_node_subset_of_the_branchy_model_extracts(size: int) -> None:
    """Not only what strategies propose: any node set, connected or not, is a valid model."""
    import itertools

    index = index_of(branchy_model())
    for subset in itertools.combinations(range(len(index.nodes)), size):
        run_in_ort(extract(index, Candidate(frozenset(subset))))


def test_boundary_tensors_become_typed_inputs_and_outputs() -> None:
    index = index_of(branchy_model())
    model = extract(index, by_names(index, "C", "E"))
    assert [i.name for i in model.graph.input] == ["a", "b"]
    assert [o.name for o in model.graph.output] == ["c", "e"]
    for info in [*model.graph.input, *model.graph.output]:
        assert info.type.tensor_type.elem_type == TensorProto.FLOAT
        assert [d.dim_value for d in info.type.tensor_type.shape.dim] == [2, 3]


def test_whole_model_extracts_to_the_same_interface() -> None:
    original = branchy_model()
    index = index_of(original)
    model = extract(index, Candidate(index.all_nodes()))
    assert [i.name for i in model.graph.input] == [i.name for i in original.graph.input]
    assert [o.name for o in model.graph.output] == [o.name for o in original.graph.output]
    feeds = random_feeds(original)
    want = ort.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w)


def test_constant_nodes_are_lowered_so_no_spurious_inputs_appear() -> None:
    index = index_of(constant_model())
    assert "Constant" not in [node.op_type for node in index.nodes]
    model = extract(index, by_names(index, "M"))
    assert [i.name for i in model.graph.input] == ["r"]  # not "k": the constant stays a constant
    assert [t.name for t in model.graph.initializer] == ["k"]
    (out,) = run_in_ort(model)
    assert out.shape == (2, 3)
    model = extract(index, by_names(index, "A"))
    assert [i.name for i in model.graph.input] == ["m"]
    assert [t.name for t in model.graph.initializer] == ["bias"]


def test_a_node_with_several_graph_outputs_keeps_them_all() -> None:
    index = index_of(multi_output_model())
    model = extract(index, by_names(index, "SPLIT"))
    assert [o.name for o in model.graph.output] == ["s0", "s1"]
    assert [i.name for i in model.graph.input] == ["n"]
    assert [t.name for t in model.graph.initializer] == ["split"]
    assert len(run_in_ort(model)) == 2


def test_a_tensor_still_read_inside_never_becomes_an_output() -> None:
    """B's output feeds C and E; with C removed it is still read by E, so the only output is h
    (Polygraphy's answer for --no-reduce-inputs on this model); before, b became an output too."""
    index = index_of(branchy_model())
    model = extract(index, by_names(index, "B", "E", "G", "H"))
    assert [o.name for o in model.graph.output] == ["h"]
    assert sorted(i.name for i in model.graph.input) == ["x0", "y0"]
    run_in_ort(model)
    model = extract(index, by_names(index, "A", "B", "C", "E"))  # c and e lost all their readers
    assert [o.name for o in model.graph.output] == ["c", "e"]


def split_branches_model() -> onnx.ModelProto:
    """A Split whose outputs feed two branches; ``n`` is both a graph output and read by Split."""
    split = numpy_helper.from_array(np.array([1, 1], dtype=np.int64), name="split")
    nodes = [
        helper.make_node("Neg", ["x"], ["n"], name="NEG"),
        helper.make_node("Split", ["n", "split"], ["s0", "s1"], name="SPLIT", axis=0),
        helper.make_node("Relu", ["s0"], ["r"], name="RELU"),
        helper.make_node("Abs", ["s1"], ["q"], name="ABS"),
    ]
    graph = helper.make_graph(
        nodes,
        "split_branches",
        [helper.make_tensor_value_info("x", FLOAT, [2, 3])],
        [helper.make_tensor_value_info("n", FLOAT, [2, 3])]
        + [helper.make_tensor_value_info(name, FLOAT, [1, 3]) for name in ("r", "q")],
        initializer=[split],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def test_outputs_of_a_node_kept_alive_inside_stay_dangling() -> None:
    """SPLIT with RELU: s0 is read inside, so s1 (whose reader ABS was removed) stays a dangling
    node output, as in Polygraphy's cone of RELU; SPLIT alone marks both. An original graph output
    (n) stays an output while it is also read inside."""
    index = index_of(split_branches_model())
    model = extract(index, by_names(index, "SPLIT", "RELU"))
    assert [o.name for o in model.graph.output] == ["r"]
    assert list(model.graph.node[0].output) == ["s0", "s1"]
    run_in_ort(model)
    assert [o.name for o in extract(index, by_names(index, "SPLIT")).graph.output] == ["s0", "s1"]
    model = extract(index, by_names(index, "NEG", "SPLIT", "ABS"))
    assert [o.name for o in model.graph.output] == ["n", "q"]
    run_in_ort(model)


def test_if_bodies_keep_their_outer_scope_reference() -> None:
    index = index_of(if_model())
    model = extract(index, by_names(index, "IF", "ABS"))
    assert sorted(i.name for i in model.graph.input) == ["a", "cond"]  # 'a' is read only inside the bodies
    (if_node,) = [n for n in model.graph.node if n.op_type == "If"]
    assert {a.name for a in if_node.attribute} == {"then_branch", "else_branch"}
    run_in_ort(model)


def test_unsorted_models_are_sorted_before_indexing() -> None:
    index = index_of(unsorted_model())
    assert [node.name for node in index.nodes] == ["FIRST", "MIDDLE", "LAST"]
    result, _, _ = reduce_with(index, fails_with_all(["MIDDLE"]), "auto")
    assert names_in(index, result.min_bad) == {"MIDDLE"}


def test_opset_ir_version_and_metadata_are_preserved() -> None:
    original = branchy_model()
    original.opset_import.append(helper.make_opsetid("com.example", 1))
    helper.set_model_props(original, {"owner": "tests"})
    original.producer_name = "unit-test"
    index = index_of(original)
    model = extract(index, by_names(index, "C"))
    assert {(o.domain, o.version) for o in model.opset_import} == {("", 17), ("com.example", 1)}
    assert model.ir_version == IR_VERSION
    assert {p.key: p.value for p in model.metadata_props} == {"owner": "tests"}
    assert model.producer_name == "unit-test"


def test_ir_version_is_capped() -> None:
    index = index_of(branchy_model())
    assert extract(index, by_names(index, "C"), ir_version_cap=7).ir_version == 7
    assert extract(index, by_names(index, "C"), ir_version_cap=99).ir_version == IR_VERSION


def test_frozen_values_replace_side_branch_inputs_of_a_primary_candidate() -> None:
    """Input-side reduction: a boundary tensor not read by the primary node becomes a constant."""
    index = index_of(branchy_model())
    candidate = by_names(index, "C", "D", "F")
    primary = next(i for i in candidate.nodes if index.nodes[i].name == "C")
    h = np.full((2, 3), 0.5, dtype=np.float32)
    model = extract(index, Candidate(candidate.nodes, primary), frozen_values={"h": h, "a": h})
    assert sorted(i.name for i in model.graph.input) == ["a", "b"]  # C's own inputs stay inputs
    assert [t.name for t in model.graph.initializer] == ["h"]
    run_in_ort(model)


@pytest.mark.parametrize("mode", ["bisect", "linear"])
def test_input_side_candidates_with_frozen_branches_are_valid(tmp_path: Path, mode: str) -> None:
    """The input-side phases make primary candidates; the shell freezes side-branch tensors with
    values from one onnxruntime run. Every such model is valid and runs."""
    from engine.workspace import ReduceOptions, load_workspace

    class Log:
        def info(self, message: str) -> None: ...

        def warning(self, message: str) -> None: ...

    onnx.save(branchy_model(), tmp_path / "model.onnx")
    ws = load_workspace(ReduceOptions(model=tmp_path / "model.onnx", work_dir=tmp_path), Log())
    try:
        _, checker, _ = reduce_with(ws.index, fails_with_all(["F"]), mode)
        primaries = [c for c in checker.seen if c.primary is not None]
        assert primaries, "the input side proposes primary candidates"
        frozen = 0
        for candidate in checker.seen:
            model = ws.model_for(candidate)
            frozen += sum(1 for t in model.graph.initializer)
            run_in_ort(model)
        assert frozen > 0, "some side branch was frozen to a constant"
    finally:
        ws.close()

"""Smaller inputs (``reducer_core.data_edits``, ``reducer_core.data_reduction``): the oracle fails
from a given input size up, and every candidate the search checks is a valid model that
onnxruntime runs at its new sizes."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench.control_flow_zoo import loop_model, node_names
from reducer_core import data_edits, modelio, weight_edits
from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.data_reduction import DataSearch, WeightSearch, input_sizes, used_candidate
from reducer_core.errors import ReplayMismatchError
from reducer_core.extract import SerializedPieces, extract, extract_bytes
from reducer_core.graph import GraphIndex
from reducer_core.machine import ReductionMachine
from reducer_core.requests import CheckRequest
from reducer_core.verdict import Verdict
from tests.models import FAIL, IR_VERSION, OPSET, PASS, index_of, random_feeds

SEQ, HIDDEN = 64, 8


def seq_model(seq: int = SEQ) -> onnx.ModelProto:
    """tokens [1, seq, 8] and mask [1, seq, 1] -> MatMul(8x8 weight) -> Add(bias[8]) -> Mul(mask)
    -> Relu -> Erf (the culprit) -> out."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(HIDDEN).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["tokens", "w"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "b"], ["biased"], name="bias"),
        helper.make_node("Mul", ["biased", "mask"], ["masked"], name="mask"),
        helper.make_node("Relu", ["masked"], ["act"], name="relu"),
        helper.make_node("Erf", ["act"], ["out"], name="culprit"),
    ]
    graph = helper.make_graph(
        nodes,
        "seq",
        [
            helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [1, seq, HIDDEN]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, seq, 1]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, seq, HIDDEN])],
        initializer=[weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


class SizeOracle:
    """Fails when node ``culprit`` is in the candidate and its model's sequence length is at least
    ``threshold``; proves every candidate valid (checker and an onnxruntime run)."""

    def __init__(self, index: GraphIndex, threshold: int, culprit: str = "culprit") -> None:
        self.index, self.threshold, self.culprit = index, threshold, culprit
        self.sizes: list[int] = []

    def __call__(self, candidate: Candidate) -> Verdict:
        model = extract(self.index, candidate)
        onnx.checker.check_model(model, full_check=True)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        outputs = session.run(None, random_feeds(model))
        assert all(o.ndim == 0 or o.size > 0 for o in outputs)
        present = {self.index.nodes[n].name for n in candidate.nodes}
        seq = max(
            (d for dims in data_edits.input_dims(model).values() for d in dims[1:2] if isinstance(d, int)), default=1
        )
        self.sizes.append(seq)
        return FAIL if self.culprit in present and seq >= self.threshold else PASS


def run(machine: ReductionMachine, oracle: Callable[[Candidate], Verdict], limit: int | None = None) -> int:
    """Drive ``machine``; stop after ``limit`` checks. Returns the checks run."""
    done = 0
    while not machine.done and (limit is None or done < limit):
        (request,) = machine.next_requests(1)
        assert not isinstance(request, str)
        machine.deliver(request, oracle(request.candidate))  # type: ignore[union-attr]
        done += 1
    return done


def session(index: GraphIndex, reduce_data: bool = True) -> ReductionMachine:
    return ReductionMachine(index, SessionConfig(reduce_data=reduce_data), VerdictCache(index.fingerprint, "c"))


def _resumed_at_each_stop_ends_like_one_run(
    index: GraphIndex, new_oracle: Callable[[], Callable[[Candidate], Verdict]], from_phase: str | None
) -> None:
    """A session run once, then again stopped after each check (from the first check of
    ``from_phase`` on, None: from the first), its state saved as JSON and resumed: the same
    min-bad, and no finished check runs again."""
    whole = session(index)
    run(whole, new_oracle())
    phases = [r.phase for r in whole.records]
    for stop in range(phases.index(from_phase) if from_phase else 1, whole.checks_run):
        first = session(index)
        run(first, new_oracle(), limit=stop)
        saved = json.loads(json.dumps(first.state()))
        second = ReductionMachine.from_state(
            index, SessionConfig(reduce_data=True), VerdictCache(index.fingerprint, "c"), saved
        )
        assert run(second, new_oracle()) == whole.checks_run - stop  # no finished check runs again
        assert second.result.min_bad == whole.result.min_bad


@pytest.mark.parametrize("threshold", [1, 2, 17, 33, 63, 64])
def test_the_sequence_shrinks_to_the_smallest_failing_size_in_few_checks(threshold: int) -> None:
    index = index_of(seq_model())
    machine = session(index)
    run(machine, SizeOracle(index, threshold))
    best = machine.result.min_bad
    assert {index.nodes[n].name for n in best.nodes} == {"culprit"}
    model = extract(index, best)
    # the hidden size fails at any size too (the Erf alone reads no weight)
    assert data_edits.input_dims(model) == {"act": [1, threshold, 1]}
    data_checks = sum(1 for r in machine.records if r.phase == "data")
    # per size: size 1 first, then halving, log2(size) at most, then bisection between the pass and the failure
    assert data_checks <= 2 * (math.log2(SEQ) + math.log2(HIDDEN)) + 2
    if threshold == 1:
        assert data_checks == 2  # a failure at every size: one check per size (size 1 first)


def test_weight_dimensions_stay_and_mask_shrinks_with_the_tokens() -> None:
    """A candidate that keeps the MatMul: the hidden size (its contraction with the weight) is
    refused without a check; tokens and mask share the sequence length and shrink together."""
    index = index_of(seq_model())
    whole = Candidate(index.all_nodes())
    search = DataSearch.start(index, whole)
    assert search is not None
    asked: list[Candidate] = []
    while (candidate := search.propose()) is not None:
        asked.append(candidate)
        sizes = data_edits.parse(candidate.data)
        search.observe(candidate, sizes.get(SEQ, SEQ) >= 5)
    assert all(str(HIDDEN) not in "".join(c.data).split("=")[0] for c in asked)
    assert data_edits.input_dims(extract(index, search.best_bad)) == {"tokens": [1, 5, HIDDEN], "mask": [1, 5, 1]}


def test_refused_sizes_cost_no_check() -> None:
    model = seq_model()
    shape = numpy_helper.from_array(np.array([1, SEQ, 2, 4], dtype=np.int64), "shape")
    model.graph.initializer.append(shape)
    model.graph.node.append(helper.make_node("Reshape", ["out", "shape"], ["flat"], name="reshape"))
    model.graph.output.append(helper.make_tensor_value_info("flat", TensorProto.FLOAT, [1, SEQ, 2, 4]))
    index = index_of(model)
    whole = Candidate(index.all_nodes())
    with pytest.raises(data_edits.DataEditError):
        extract(index, Candidate(whole.nodes, None, frozenset(), frozenset({data_edits.dim_edit(SEQ, 32)})))
    search = DataSearch.start(index, whole)
    assert search is not None and search.propose() is None  # nothing to check: every size refused


def test_a_data_candidate_has_its_own_fingerprint_json_and_bytes() -> None:
    index = index_of(seq_model())
    plain = Candidate(frozenset({4}))
    shrunk = Candidate(plain.nodes, None, frozenset(), frozenset({data_edits.dim_edit(SEQ, 3)}))
    assert plain.fingerprint == Candidate(frozenset({4})).fingerprint
    assert "data" not in plain.to_json()
    assert shrunk.fingerprint != plain.fingerprint
    assert Candidate.from_json(json.loads(json.dumps(shrunk.to_json()))) == shrunk
    written = onnx.load_from_string(extract_bytes(SerializedPieces(index), shrunk))
    assert written == extract(index, shrunk)


def test_a_session_resumed_in_the_data_phase_ends_like_one_run() -> None:
    index = index_of(seq_model())
    _resumed_at_each_stop_ends_like_one_run(index, lambda: SizeOracle(index, 17), from_phase=None)


def test_reduce_data_off_by_default_and_old_states_resume_with_it_on() -> None:
    index = index_of(seq_model())
    off = session(index, reduce_data=False)
    oracle = SizeOracle(index, 1)
    run(off, oracle)
    assert not off.result.min_bad.data
    assert "reduce_data" not in off.state()["config"]
    saved = json.loads(json.dumps(off.state()))  # as a session saved before data reduction existed
    resumed = ReductionMachine.from_state(
        index, SessionConfig(reduce_data=True), VerdictCache(index.fingerprint, "c"), saved
    )
    more = SizeOracle(index, 1)
    run(resumed, more)
    assert more.sizes == [1, 1]  # only the data phase's checks (sequence, then hidden: size 1 first)
    on_state = json.loads(json.dumps(resumed.state()))
    assert on_state["config"]["reduce_data"] is True
    with pytest.raises(ReplayMismatchError):
        ReductionMachine.from_state(index, SessionConfig(), VerdictCache(index.fingerprint, "c"), on_state)


# -- the weights the min-bad model reads (``reducer_core.weight_edits``) -------------------------------

ROWS = 4 * SEQ  # the position table's rows: the model reads the first SEQ of them


def position_model() -> onnx.ModelProto:
    """x [1, SEQ, 8] + Gather(table [4*SEQ, 8] whose row r holds 10*r, constant positions
    0..SEQ-1) -> Relu -> out: the positions' values grow with the sequence."""
    table = np.repeat(np.arange(ROWS, dtype=np.float32)[:, None] * 10, HIDDEN, axis=1)
    positions = np.arange(SEQ, dtype=np.int64)[None, :]
    nodes = [
        helper.make_node("Gather", ["table", "positions"], ["pos"], name="gather", axis=0),
        helper.make_node("Add", ["x", "pos"], ["h"], name="add"),
        helper.make_node("Relu", ["h"], ["out"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "positions",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        initializer=[numpy_helper.from_array(table, "table"), numpy_helper.from_array(positions, "positions")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


class LargeValueOracle:
    """Fails when some output of the candidate's model (run by onnxruntime) or of the Gather in it
    reaches ``limit``; proves every candidate valid (the full checker and a run)."""

    def __init__(self, index: GraphIndex, limit: float) -> None:
        self.index, self.limit = index, limit
        self.models: list[onnx.ModelProto] = []

    def __call__(self, candidate: Candidate) -> Verdict:
        model = extract(self.index, candidate)
        onnx.checker.check_model(model, full_check=True)
        self.models.append(model)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        outputs = session.run(None, random_feeds(model))
        return FAIL if max(float(np.max(o)) for o in outputs) >= self.limit else PASS


def _initializer_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    return {t.name: list(t.dims) for t in model.graph.initializer}


@pytest.mark.parametrize("limit", [100.0, 300.0])
def test_the_weights_shrink_to_the_rows_and_sizes_that_still_fail(limit: float) -> None:
    """The Gather alone fails (its rows reach ``limit`` from position limit/10 on): the positions
    shrink to the fewest that reach it, the hidden size to 1, and the table to the rows read."""
    index = index_of(position_model())
    machine = session(index)
    run(machine, LargeValueOracle(index, limit))
    best = machine.result.min_bad
    assert {index.nodes[n].name for n in best.nodes} == {"gather"}
    needed = int(limit // 10) + 1  # positions 0..needed-1: the last one is 10*(needed-1) >= limit
    model = extract(index, best)
    assert _initializer_shapes(model) == {"table": [needed, 1], "table.indices": [1, needed]}  # shifted by 0
    sizes = input_sizes(index, best)
    assert sizes is not None
    assert sizes["initializer_bytes_before"] == ROWS * HIDDEN * 4 + SEQ * 8
    assert sizes["initializer_bytes_after"] == needed * 4 + needed * 8
    data_checks = sum(1 for r in machine.records if r.phase == "data")
    assert data_checks <= 2 * (math.log2(SEQ) + math.log2(HIDDEN)) + 1  # two searches and the slicing
    # what the model computes is what the first rows of the full table gave
    run_model = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (values,) = run_model.run(None, {})
    assert values[0, :, 0].tolist() == [10.0 * r for r in range(needed)]


def test_slicing_the_rows_read_computes_the_same_values() -> None:
    """Slice and Gather readers with constant arguments (negative ones included): the table
    shrinks to the rows they read and every output is unchanged."""
    rng = np.random.default_rng(1)
    table = rng.standard_normal((50, 6)).astype(np.float32)
    inits = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(np.array([10, 1], np.int64), "starts"),
        numpy_helper.from_array(np.array([-30, 5], np.int64), "ends"),
        numpy_helper.from_array(np.array([0, 1], np.int64), "axes"),
        numpy_helper.from_array(np.array([[12, -35]], np.int64), "rows"),
    ]
    nodes = [
        helper.make_node("Slice", ["table", "starts", "ends", "axes"], ["sliced"], name="slice"),
        helper.make_node("Gather", ["table", "rows"], ["gathered"], name="gather"),
        helper.make_node("Relu", ["sliced"], ["a"], name="relu"),
        helper.make_node("Abs", ["gathered"], ["b"], name="abs"),
    ]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("a", "b")]
    graph = helper.make_graph(nodes, "reads", [], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    index = index_of(model)
    whole = Candidate(index.all_nodes())
    candidate = used_candidate(index, whole)
    assert candidate is not None and candidate.data == {weight_edits.used_edit("table")}
    edited = extract(index, candidate)
    onnx.checker.check_model(edited, full_check=True)
    assert _initializer_shapes(edited)["table"] == [10, 6]  # rows 10..19 (the gather's 12 and 15 inside), all columns
    before = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    after = ort.InferenceSession(edited.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    for old, new in zip(before, after, strict=True):
        np.testing.assert_array_equal(old, new)
    assert weight_edits.initializer_bytes(edited) < weight_edits.initializer_bytes(model)


def test_a_weight_read_whole_or_by_unknown_indices_is_not_sliced() -> None:
    model = position_model()
    model.graph.node[0].input[1] = "ids"  # the positions become a graph input: any row may be read
    model.graph.input.append(helper.make_tensor_value_info("ids", TensorProto.INT64, [1, SEQ]))
    index = index_of(model)
    assert used_candidate(index, Candidate(index.all_nodes())) is None
    with pytest.raises(data_edits.DataEditError):
        extract(index, Candidate(index.all_nodes(), None, frozenset(), frozenset({weight_edits.used_edit("table")})))


def test_a_hidden_size_shrinks_with_its_weight_and_inputs_together() -> None:
    """tokens [1, 64, 8] @ w [8, 8] + b [8]: the input sizes alone cannot shrink the hidden size
    (the weight's contraction dimension); the weight search shrinks it in the weight, the bias and
    the inputs at once, and every such candidate passes the full checker."""
    index = index_of(seq_model())
    whole = Candidate(frozenset({0, 1}))  # MatMul and Add
    search = WeightSearch.start(index, whole)
    assert search is not None
    candidate = search.propose()
    assert candidate is not None and candidate.data == {weight_edits.dim_edit(HIDDEN, 1)}  # size 1 first
    search.observe(candidate, False)
    candidate = search.propose()  # then halving
    assert candidate is not None and candidate.data == {weight_edits.dim_edit(HIDDEN, HIDDEN // 2)}
    model = extract(index, candidate)
    onnx.checker.check_model(model, full_check=True)
    assert _initializer_shapes(model) == {"w": [4, 4], "b": [4]}
    assert data_edits.input_dims(model) == {"tokens": [1, SEQ, 4]}


def test_a_session_resumed_in_the_weight_phase_ends_like_one_run() -> None:
    index = index_of(position_model())
    _resumed_at_each_stop_ends_like_one_run(index, lambda: LargeValueOracle(index, 100.0), from_phase="data")


def test_no_weight_edits_without_reduce_data() -> None:
    index = index_of(position_model())
    machine = session(index, reduce_data=False)
    run(machine, LargeValueOracle(index, 100.0))
    assert not machine.result.min_bad.data
    assert _initializer_shapes(extract(index, machine.result.min_bad))["table"] == [ROWS, HIDDEN]


def test_external_weights_are_read_sliced_and_the_others_left_in_their_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every weight in a file beside the model (as the workspace keeps them): the table's columns
    are read from the file and shrink; the projection ``w2`` (no dimension of the group) stays a
    reference into the file, and the candidate still passes the full checker though the file is
    not in this process's working directory."""
    model = position_model()
    model.graph.node[2].op_type, model.graph.node[2].name = "MatMul", "project"
    model.graph.node[2].input.append("w2")
    model.graph.initializer.append(numpy_helper.from_array(np.ones((HIDDEN, 5), np.float32), "w2"))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, SEQ, 5]))
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.bin", size_threshold=0)
    monkeypatch.chdir(tmp_path.parent)  # the checker would look for m.bin here
    loaded, sources = modelio.load_model(tmp_path / "m.onnx")
    index = GraphIndex.build(loaded, modelio.weight_reader(sources))
    candidate = Candidate(index.all_nodes(), None, frozenset(), frozenset({weight_edits.dim_edit(SEQ, 4)}))
    edited = extract(index, candidate)
    shapes = {t.name: (list(t.dims), t.data_location) for t in edited.graph.initializer}
    assert shapes["positions"] == ([1, 4], TensorProto.DEFAULT)  # read from m.bin, sliced, inline
    assert shapes["w2"] == ([HIDDEN, 5], TensorProto.EXTERNAL)  # untouched: still in m.bin
    assert data_edits.input_dims(edited) == {"x": [1, 4, HIDDEN]}
    sliced = used_candidate(index, candidate)
    assert sliced is not None
    table = next(t for t in extract(index, sliced).graph.initializer if t.name == "table")
    np.testing.assert_array_equal(numpy_helper.to_array(table)[:, 0], [0.0, 10.0, 20.0, 30.0])


def test_a_loop_answer_and_every_data_candidate_pass_the_full_checker() -> None:
    """The culprit fails only inside its Loop (whose body declares [2, 3]): a smaller input leaves
    the Loop's outputs without a shape, a model the full checker refuses, so no such size is
    proposed; the answer, and every candidate checked, passes ``check_model(full_check=True)``."""
    index = index_of(loop_model(length=12, culprit=5))
    config = SessionConfig(reduce_data=True, reduce_bodies=False)  # the Loop whole: its body's shapes fixed
    machine = ReductionMachine(index, config, VerdictCache(index.fingerprint, "c"))
    checked: list[onnx.ModelProto] = []
    while not machine.done:
        (request,) = machine.next_requests(1)
        assert isinstance(request, CheckRequest)
        model = extract(index, request.candidate)
        checked.append(model)
        inside = any(node.op_type == "Loop" for node in model.graph.node)
        machine.deliver(request, FAIL if inside and "body/culprit" in node_names(model) else PASS)
    answer = extract(index, machine.result.min_bad)
    assert [node.op_type for node in answer.graph.node] == ["Loop"]
    onnx.checker.check_model(answer, full_check=True)
    for model in checked:
        onnx.checker.check_model(model, full_check=True)
    assert data_edits.input_dims(answer) == {"pre": [2, 3]}


@pytest.mark.parametrize(
    ("fixed", "expected"),
    [
        ({"fixed_sizes": frozenset({SEQ})}, [1, SEQ, 1]),  # --model-input-shapes gave 64: the hidden size alone shrinks
        ({"fixed_inputs": True}, [1, SEQ, HIDDEN]),  # the check feeds its own values: no input size shrinks
    ],
)
def test_sizes_the_user_fixed_never_shrink(fixed: dict[str, object], expected: list[int]) -> None:
    index = index_of(seq_model())
    config = SessionConfig(reduce_data=True, **fixed)  # type: ignore[arg-type]
    machine = ReductionMachine(index, config, VerdictCache(index.fingerprint, "c"))
    oracle = SizeOracle(index, 1)  # fails at any size
    run(machine, oracle)
    assert data_edits.input_dims(extract(index, machine.result.min_bad)) == {"act": expected}
    assert "fixed_sizes" not in machine.state()["config"] and "fixed_inputs" not in machine.state()["config"]

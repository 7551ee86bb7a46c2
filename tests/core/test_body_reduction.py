"""Reduction inside Loop and If bodies (``reducer_core.bodies``, ``reducer_core.body_reduction``):
the oracle fails when a named body node is present anywhere in the candidate's model, and it
also proves every candidate a valid model: ``onnx.checker.check_model(full_check=True)`` and a
run in onnxruntime."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from bench.control_flow_zoo import FLOAT, _model, _value, if_model, loop_body, loop_model, nested_model, node_names
from reducer_core import bodies
from reducer_core.bodies import body_size
from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.extract import SerializedPieces, extract, extract_bytes
from reducer_core.graph import GraphIndex, node_reads
from reducer_core.machine import ReductionMachine
from reducer_core.requests import CheckRequest, Request
from reducer_core.strategies import MODES, SearchSpace, Strategy
from reducer_core.verdict import Verdict
from tests.core.test_control_flow import exported_if_model, exported_loop_model
from tests.models import FAIL, PASS, index_of, random_feeds
from tests.oracle_reduction import Reduction, ReductionResult

CASES: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "loop": (loop_model, "body/culprit"),
    "if": (if_model, "else/culprit"),
    "nested": (nested_model, "inner_then/culprit"),
}


def valid(model: onnx.ModelProto) -> None:
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    session.run(None, random_feeds(model))


class BodyOracle:
    """Fails when ``culprit`` names a node of the candidate's model, in or out of bodies."""

    def __init__(self, index: GraphIndex, culprit: str) -> None:
        self.index = index
        self.culprit = culprit
        self.seen: list[Candidate] = []

    def __call__(self, candidate: Candidate, iteration: int = 0) -> Verdict:
        model = extract(self.index, candidate)
        valid(model)
        self.seen.append(candidate)
        return FAIL if self.culprit in node_names(model) else PASS


def reduce(index: GraphIndex, culprit: str, mode: str = "auto") -> tuple[ReductionResult, BodyOracle]:
    oracle = BodyOracle(index, culprit)
    strategy = Strategy(SearchSpace(index, index.all_nodes()), mode)
    return Reduction(strategy, oracle, VerdictCache(index.fingerprint, "body")).run(), oracle


def real_body_nodes(model: onnx.ModelProto) -> set[str]:
    """Node names in and out of bodies, less the plumbing ``Identity`` of a hoisted output."""
    return {name for name in node_names(model) if not name.endswith("/hoisted")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_answer_is_the_culprit_in_a_small_body_within_the_check_budget(case: str) -> None:
    build, culprit = CASES[case]
    model = build()
    index = index_of(model)
    result, oracle = reduce(index, culprit)
    answer = extract(index, result.min_bad)
    valid(answer)
    assert culprit in node_names(answer)
    kept = real_body_nodes(answer)
    inlined = any(path.endswith("/inline") for path in result.min_bad.body)
    if inlined:  # the culprit reads no iteration state: it left the body
        assert kept == {culprit}
    else:
        assert len(kept) <= 4  # the control-flow node(s) holding it, with 1-3 body nodes
    assert result.checks_run <= math.ceil(math.log2(body_size(model))) + 4
    assert body_size(answer) <= 5
    assert len(oracle.seen) == result.checks_run  # every check ran on a valid model


def test_a_loop_culprit_that_reads_no_iteration_state_is_extracted_as_a_plain_subgraph() -> None:
    index = index_of(loop_model())
    result, _ = reduce(index, "body/culprit")
    answer = extract(index, result.min_bad)
    assert [node.op_type for node in answer.graph.node] == ["Erf"]
    assert result.iterations[-1].phase == "body-extract"


def test_a_failure_that_needs_the_loop_keeps_it_although_the_culprit_could_leave() -> None:
    """The check fails only with the culprit inside the Loop: the inlined forms (which answer
    for single-node proposals) all pass, so the search runs again without them."""
    index = index_of(loop_model(length=12, culprit=5))

    class InLoop(BodyOracle):
        def __call__(self, candidate: Candidate, iteration: int = 0) -> Verdict:
            verdict = super().__call__(candidate, iteration)
            inside = any(node.op_type == "Loop" for node in extract(self.index, candidate).graph.node)
            return verdict if inside else PASS

    oracle = InLoop(index, "body/culprit")
    strategy = Strategy(SearchSpace(index, index.all_nodes()), "auto")
    result = Reduction(strategy, oracle, VerdictCache(index.fingerprint, "c")).run()
    answer = extract(index, result.min_bad)
    assert [node.op_type for node in answer.graph.node] == ["Loop"]
    assert real_body_nodes(answer) == {"loop", "body/culprit"}
    assert any(any(path.endswith("/inline") for path in candidate.body) for candidate in oracle.seen)


def test_a_culprit_reading_the_iteration_state_stays_in_its_loop() -> None:
    """The nested If reads the Loop's condition input: the answer keeps the Loop around it."""
    index = index_of(nested_model())
    result, _ = reduce(index, "inner_then/culprit")
    answer = extract(index, result.min_bad)
    assert [node.op_type for node in answer.graph.node] == ["Loop"]
    assert {"loop", "body/if", "inner_then/culprit"} <= node_names(answer)
    assert not any(path.endswith("/inline") for path in result.min_bad.body)


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_reduces_the_body_and_every_candidate_is_valid(mode: str) -> None:
    index = index_of(loop_model(length=12, culprit=5))
    result, oracle = reduce(index, "body/culprit", mode)
    assert "body/culprit" in node_names(extract(index, result.min_bad))
    assert body_size(extract(index, result.min_bad)) <= 3
    assert any(candidate.body for candidate in oracle.seen)


@pytest.mark.parametrize("culprit", ["body_concat", "then_mul", "body_relu", "body_add"])
def test_an_exported_loop_with_unshaped_bodies_reduces_to_valid_models(culprit: str) -> None:
    """Exporter-style bodies (inputs without shapes, an If nested in the body, outer-scope reads):
    whatever goes, every candidate is valid, and the culprit stays."""
    index = index_of(exported_loop_model())
    result, oracle = reduce(index, culprit)
    assert any(candidate.body for candidate in oracle.seen)
    answer = extract(index, result.min_bad)
    assert culprit in node_names(answer)
    assert body_size(answer) < body_size(exported_loop_model())


def test_a_body_candidate_has_its_own_fingerprint_and_json() -> None:
    plain = Candidate(frozenset({1, 2}))
    edited = Candidate(frozenset({1, 2}), None, frozenset({"1/body/3", "1/body/1/then_branch/0"}))
    assert plain.fingerprint == Candidate(frozenset({2, 1})).fingerprint
    assert edited.fingerprint != plain.fingerprint
    assert "body" not in plain.to_json()
    assert Candidate.from_json(json.loads(json.dumps(edited.to_json()))) == edited
    assert Candidate.from_json({"nodes": [1, 2], "primary": None}) == plain


def test_written_bytes_equal_the_extracted_model() -> None:
    index = index_of(loop_model())
    result, _ = reduce(index, "body/culprit")
    pieces = SerializedPieces(index)
    for candidate in (result.min_bad, *(record.candidate for record in result.iterations)):
        parsed = onnx.ModelProto()
        parsed.ParseFromString(extract_bytes(pieces, candidate))
        assert parsed == extract(index, candidate)


def _run(machine: ReductionMachine, oracle: BodyOracle, limit: int | None = None) -> list[Request]:
    seen: list[Request] = []
    while not machine.done and (limit is None or len(seen) < limit):
        (request,) = machine.next_requests(1)
        assert isinstance(request, CheckRequest)
        seen.append(request)
        machine.deliver(request, oracle(request.candidate))
    return seen


def test_a_session_resumed_in_the_body_phase_ends_like_one_run() -> None:
    index = index_of(if_model(length=6, culprit=2))
    config = SessionConfig(min_good=True)
    whole = ReductionMachine(index, config, VerdictCache(index.fingerprint, "c"))
    sequence = [r.id for r in _run(whole, BodyOracle(index, "else/culprit"))]
    phases = [record.phase for record in whole.records]
    assert any(phase.startswith("body-") for phase in phases)
    for stop in range(1, len(sequence)):
        first = ReductionMachine(index, config, VerdictCache(index.fingerprint, "c"))
        before = [r.id for r in _run(first, BodyOracle(index, "else/culprit"), limit=stop)]
        saved = json.loads(json.dumps(first.state()))
        second = ReductionMachine.from_state(index, config, VerdictCache(index.fingerprint, "c"), saved)
        rest = [r.id for r in _run(second, BodyOracle(index, "else/culprit"))]
        assert before + rest == sequence, stop
        assert second.result.min_bad == whole.result.min_bad
        assert second.result.min_good == whole.result.min_good
        assert second.checks_run == whole.checks_run


def test_pinned_inputs_keep_bodies_whole() -> None:
    """Hoisting a body tensor adds a graph input: not with --no-reduce-inputs."""
    index = index_of(loop_model(length=8, culprit=3))
    oracle = BodyOracle(index, "body/culprit")
    strategy = Strategy(SearchSpace(index, index.all_nodes(), reduce_inputs=False), "bisect")
    result = Reduction(strategy, oracle, VerdictCache(index.fingerprint, "c")).run()
    assert not result.min_bad.body
    assert not any(candidate.body for candidate in oracle.seen)


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "exported_loop": exported_loop_model,
    "exported_if": exported_if_model,
    "loop30": loop_model,
    "if20": if_model,
    "nested2": nested_model,
}


@pytest.mark.parametrize("name", sorted(MODELS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_body_edits_are_valid_models(name: str, data: st.DataObject) -> None:
    """Any set of body nodes kept (with any outer node set holding a control-flow node), and its
    extracted form where one applies: the full checker passes and onnxruntime runs it."""
    index = index_of(MODELS[name]())
    flows = [n for n in index.all_nodes() if bodies.body_attrs(index.nodes[n])]
    outer = data.draw(st.sets(st.sampled_from(sorted(index.all_nodes())), min_size=0)) | {
        data.draw(st.sampled_from(flows))
    }
    flat = bodies.Flattened.build(bodies.plan_for(index), outer)
    kept = data.draw(st.sets(st.integers(0, max(len(flat.elements) - 1, 0))))
    removed = flat.removed(frozenset(kept))
    candidate = Candidate(frozenset(outer), None, removed)
    valid(extract(index, candidate))
    if len(outer) == 1 and removed and bodies.inlinable(index, min(outer), removed):
        (top,) = outer
        inlined = extract(index, Candidate(frozenset(outer), None, removed | {bodies.inline_id(top)}))
        if inlined.graph.node:
            valid(inlined)


def test_reduce_bodies_off_keeps_bodies_whole_and_is_part_of_the_saved_config() -> None:
    index = index_of(loop_model(length=8, culprit=3))
    oracle = BodyOracle(index, "body/culprit")
    config = SessionConfig(reduce_bodies=False)
    machine = ReductionMachine(index, config, VerdictCache(index.fingerprint, "c"))
    _run(machine, oracle)
    assert not machine.result.min_bad.body
    assert not any(candidate.body for candidate in oracle.seen)
    assert config.to_json()["reduce_bodies"] is False
    assert "reduce_bodies" not in SessionConfig().to_json()  # sessions saved before it resume


@pytest.mark.parametrize(
    ("build", "culprit", "positions", "over"),
    [
        (loop_model, "body/culprit", range(0, 29, 3), 0),
        (nested_model, "inner_then/culprit", range(0, 10, 3), 0),
        (if_model, "else/culprit", range(0, 20, 2), 1),  # 2 of these 10 positions take one check more
    ],
)
def test_the_check_budget_wherever_the_culprit_sits(
    build: Callable[..., onnx.ModelProto], culprit: str, positions: range, over: int
) -> None:
    for position in positions:
        model = build(culprit=position)
        index = index_of(model)
        result, _ = reduce(index, culprit)
        answer = extract(index, result.min_bad)
        assert culprit in node_names(answer)
        assert len(real_body_nodes(answer)) <= 3, position
        assert result.checks_run <= math.ceil(math.log2(body_size(model))) + 4 + over, position


# -- issue 26 item 5: what is left in a body, what the answer keeps, how it is counted ------------


def _loop_with_an_unread_node() -> onnx.ModelProto:
    """pre -> Loop (a 6-node body plus ``body/dead``, a Shape nothing reads) -> post."""
    body = loop_body("body", 6, None)
    body.node.insert(1, helper.make_node("Shape", ["v"], ["dead_out"], name="body/dead"))
    nodes = [
        helper.make_node("Relu", ["x"], ["pre"], name="pre"),
        helper.make_node("Loop", ["trip", "cond", "pre"], ["final", "scan"], name="loop", body=body),
        helper.make_node("Neg", ["final"], ["y"], name="post"),
    ]
    return _model(nodes, [_value("y", FLOAT, [2, 3])], "deadloop")


def test_bodies_left_empty_that_still_fail_win_over_a_node_nothing_reads() -> None:
    """The failure needs the Loop, none of its body nodes (an op-present check of ``Loop``): the
    answer is the Loop with an empty body (1-minimal), not the Loop with one body node its
    strategy never tried without (a strategy never proposes an empty set)."""
    index = index_of(_loop_with_an_unread_node())
    result, oracle = reduce(index, "loop")
    answer = extract(index, result.min_bad)
    valid(answer)
    assert real_body_nodes(answer) == {"loop"}
    assert len(oracle.seen) == result.checks_run


def test_a_culprit_in_a_body_costs_no_empty_body_check() -> None:
    """The empty bodies are tried only when no candidate passed: a body culprit's search saw
    passes (the bodies without it pass too), so it pays nothing more."""
    index = index_of(loop_model())
    _, oracle = reduce(index, "body/culprit")
    assert not any(c.body and len(c.nodes) == 1 and bodies.kept_count(index, 1, c.body) == 0 for c in oracle.seen)


def test_an_answer_with_edited_bodies_keeps_no_unused_graph_input_or_initializer() -> None:
    """Both branches of the If emptied: what only their nodes read ('pre') is no input any more."""
    index = index_of(if_model())
    (top,) = [n for n in index.all_nodes() if index.nodes[n].op_type == "If"]
    removed = frozenset(f"{top}/{branch}/{i}" for branch in ("then_branch", "else_branch") for i in range(20))
    model = extract(index, Candidate(frozenset({top}), None, removed))
    valid(model)
    read = {name for node in model.graph.node for name in node_reads(node)}
    assert {i.name for i in model.graph.input} <= read
    assert {t.name for t in model.graph.initializer} <= read
    assert "pre" not in {i.name for i in model.graph.input}


def test_node_counts_include_body_nodes() -> None:
    model = loop_model()
    index = index_of(model)
    result, _ = reduce(index, "body/culprit")
    assert result.nodes_before == body_size(model) == 34  # 4 top-level nodes, 30 in the Loop's body
    assert result.nodes_after == body_size(extract(index, result.min_bad)) == 1
    assert bodies.deep_count(index, Candidate(index.all_nodes())) == 34

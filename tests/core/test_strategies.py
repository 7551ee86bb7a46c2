"""Pure strategy tests (no I/O): a fake checker that fails when named nodes are present drives
``Strategy`` + ``Reduction`` on a branchy two-input two-output model, in every mode."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import pytest

from reducer_core.candidate import Candidate
from reducer_core.errors import ReplayMismatchError, UsageError
from reducer_core.flakiness import CONFIRM_LIMIT
from reducer_core.graph import GraphIndex
from reducer_core.strategies import MODES, SearchSpace, Strategy
from reducer_core.strategies.minimize import one_minimal
from reducer_core.verdict import VerdictKind
from tests.models import BRANCHY_NODES, branchy_model, fails_with_all, index_of, names_in, reduce_with


@pytest.fixture(scope="module")
def branchy() -> GraphIndex:
    return index_of(branchy_model())


def node_index(index: GraphIndex, name: str) -> int:
    return next(i for i, node in enumerate(index.nodes) if node.name == name)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("culprit", BRANCHY_NODES)
def test_single_failing_node_is_isolated_exactly(branchy: GraphIndex, mode: str, culprit: str) -> None:
    result, checker, _ = reduce_with(branchy, fails_with_all([culprit]), mode)
    assert names_in(branchy, result.min_bad) == {culprit}
    assert result.nodes_before == len(BRANCHY_NODES)
    assert result.checks_run == len(checker.seen)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op_type", ["Relu", "Sub", "Max"])
def test_failing_op_type_is_isolated(branchy: GraphIndex, mode: str, op_type: str) -> None:
    def fails(present: set[str]) -> bool:
        return any(branchy.nodes[node_index(branchy, name)].op_type == op_type for name in present)

    result, _, _ = reduce_with(branchy, fails, mode)
    assert [branchy.nodes[n].op_type for n in result.min_bad.nodes] == [op_type]


def kept_nodes(index: GraphIndex, fails: Callable[[set[str]], bool], mode: str) -> set[str]:
    """The names of the nodes a reduction in ``mode`` keeps when ``fails`` says which sets fail."""
    result, _, _ = reduce_with(index, fails, mode)
    return names_in(index, result.min_bad)


# Pairs on different branches, on one path, and across the two outputs.
PAIRS = [("A", "B"), ("C", "E"), ("A", "H"), ("D", "F"), ("B", "G"), ("G", "D")]


@pytest.mark.parametrize("mode", ["auto", "minimize"])
@pytest.mark.parametrize("pair", PAIRS)
def test_two_interacting_nodes_are_both_kept_and_nothing_else(
    branchy: GraphIndex, mode: str, pair: tuple[str, str]
) -> None:
    assert kept_nodes(branchy, fails_with_all(pair), mode) == set(pair)


@pytest.mark.parametrize("mode", ["bisect", "linear"])
@pytest.mark.parametrize("pair", PAIRS)
def test_bisect_and_linear_keep_both_needed_nodes_and_drop_unrelated_branches(
    branchy: GraphIndex, mode: str, pair: tuple[str, str]
) -> None:
    kept = kept_nodes(branchy, fails_with_all(pair), mode)
    assert set(pair) <= kept
    # Bisect/linear keep at most what lies between the two nodes (the smallest connected cover):
    # never a node that is neither an ancestor nor a descendant of one of the pair.
    ids = [node_index(branchy, name) for name in pair]
    everything = branchy.all_nodes()
    related = branchy.ancestors(ids, everything) | branchy.descendants(ids, everything)
    assert kept <= names_in(branchy, related)
    assert len(kept) < len(BRANCHY_NODES)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("culprit", BRANCHY_NODES)
def test_no_reduce_inputs_keeps_the_culprits_whole_upstream_cone(branchy: GraphIndex, mode: str, culprit: str) -> None:
    result, _, _ = reduce_with(branchy, fails_with_all([culprit]), mode, reduce_inputs=False)
    cone = branchy.ancestors([node_index(branchy, culprit)], branchy.all_nodes())
    assert result.min_bad.nodes == cone
    for n in result.min_bad.nodes:  # closed upwards: every input is an original graph input
        assert branchy.preds[n] <= result.min_bad.nodes


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("culprit", BRANCHY_NODES)
def test_no_reduce_outputs_keeps_the_culprits_whole_downstream_cone(
    branchy: GraphIndex, mode: str, culprit: str
) -> None:
    result, _, _ = reduce_with(branchy, fails_with_all([culprit]), mode, reduce_outputs=False)
    cone = branchy.descendants([node_index(branchy, culprit)], branchy.all_nodes())
    assert result.min_bad.nodes == cone
    for n in result.min_bad.nodes:  # closed downwards: every output stays inside or is a model output
        assert branchy.succs[n] <= result.min_bad.nodes


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("culprits", [("F",), ("C", "E"), ("A", "H")])
def test_no_candidate_is_checked_twice(branchy: GraphIndex, mode: str, culprits: tuple[str, ...]) -> None:
    """...but to confirm an answer of 2-3 nodes (``SessionConfig.confirm_flaky``, at most
    ``CONFIRM_LIMIT`` re-checks of its passing candidates); never on a one-node answer."""
    result, checker, _ = reduce_with(branchy, fails_with_all(culprits), mode)
    fingerprints = [c.fingerprint for c in checker.seen]
    confirms = [r for r in result.iterations if r.phase == "flaky-confirm"]
    assert len(fingerprints) - len(set(fingerprints)) == len(confirms) <= CONFIRM_LIMIT
    assert not confirms or 2 <= len(result.min_bad) <= CONFIRM_LIMIT
    assert all(r.candidate.nodes < result.min_bad.nodes and r.verdict.kind is VerdictKind.PASS for r in confirms)
    assert result.flakiness is None and result.checks_run == len(fingerprints)
    # Every proposal the strategy made was either checked or answered from the cache.
    assert len(result.iterations) == result.checks_run + result.cache_hits  # the original's record included


CHECK_BUDGET = {"auto": 8, "minimize": 8, "bisect": 9, "linear": 17}


@pytest.mark.parametrize("mode", MODES)
def test_single_node_costs_few_checks(branchy: GraphIndex, mode: str) -> None:
    """Isolating one node of 8 (original check included): the search modes beat one check per
    node, bisect stays near it, linear never needs more than two sweeps."""
    for culprit in BRANCHY_NODES:
        result, _, _ = reduce_with(branchy, fails_with_all([culprit]), mode)
        assert result.checks_run <= CHECK_BUDGET[mode], (mode, culprit, result.checks_run)


@pytest.mark.parametrize("mode", MODES)
def test_min_good_passes_and_is_a_proposed_candidate(branchy: GraphIndex, mode: str) -> None:
    fails = fails_with_all(["H"])
    result, checker, _ = reduce_with(branchy, fails, mode)
    assert result.min_good is not None
    assert result.min_good in checker.seen
    assert not fails(names_in(branchy, result.min_good))


def drive(strategy: Strategy, index: GraphIndex, culprits: set[str], steps: int) -> int:
    """Answer ``steps`` proposals (fewer if the strategy ends); returns how many were answered."""
    for done in range(steps):
        candidate = strategy.propose()
        if candidate is None:
            return done
        strategy.observe(candidate, culprits <= names_in(index, candidate))
    return steps


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("steps", [0, 1, 3, 6])
def test_state_round_trip_resumes_at_the_same_proposal(branchy: GraphIndex, mode: str, steps: int) -> None:
    space = SearchSpace(branchy, branchy.all_nodes())
    culprits = {"C", "E"}
    original = Strategy(space, mode)
    answered = drive(original, branchy, culprits, steps)
    state = json.loads(json.dumps(original.state()))  # JSON-serialisable
    assert len(state["observations"]) == answered

    resumed = Strategy.from_state(space, state)
    assert resumed.propose() == original.propose()
    assert resumed.best_bad == original.best_bad
    assert resumed.phase == original.phase
    # Both continue identically to the same end.
    drive(original, branchy, culprits, 1000)
    drive(resumed, branchy, culprits, 1000)
    assert resumed.done and original.done
    assert resumed.best_bad == original.best_bad
    assert names_in(branchy, resumed.best_bad) == culprits


def test_state_of_another_graph_is_refused(branchy: GraphIndex) -> None:
    from onnx import helper

    from tests.models import make_model

    other = index_of(make_model([helper.make_node("Relu", ["x"], ["y"], name="R")], ["x"], ["y"]))
    state = Strategy(SearchSpace(branchy, branchy.all_nodes()), "auto").state()
    with pytest.raises(ReplayMismatchError):
        Strategy.from_state(SearchSpace(other, other.all_nodes()), state)


def test_state_with_diverging_observations_is_refused(branchy: GraphIndex) -> None:
    space = SearchSpace(branchy, branchy.all_nodes())
    strategy = Strategy(space, "minimize")
    drive(strategy, branchy, {"F"}, 2)
    state = strategy.state()
    state["observations"][1][0] = "0" * 24
    with pytest.raises(ReplayMismatchError):
        Strategy.from_state(space, state)


def test_observe_refuses_a_candidate_that_was_not_proposed(branchy: GraphIndex) -> None:
    strategy = Strategy(SearchSpace(branchy, branchy.all_nodes()), "bisect")
    with pytest.raises(ReplayMismatchError):
        strategy.observe(Candidate(frozenset({0})), True)


def test_unknown_mode_is_a_usage_error(branchy: GraphIndex) -> None:
    with pytest.raises(UsageError, match="Choose one of"):
        Strategy(SearchSpace(branchy, branchy.all_nodes()), "fastest")


@pytest.mark.parametrize("mode", MODES)
def test_never_proposes_empty_or_foreign_nodes(branchy: GraphIndex, mode: str) -> None:
    _, checker, _ = reduce_with(branchy, fails_with_all(["E", "D"]), mode)
    for candidate in checker.seen:
        assert candidate.nodes
        assert candidate.nodes <= branchy.all_nodes()


def hub_model(side_branches: int = 20) -> GraphIndex:
    """A hub feeding many side branches (all graph outputs) and a chain at the end of the order:
    one connected component, larger than what pruning removes node by node."""
    from onnx import helper

    from tests.models import make_model

    nodes = [helper.make_node("Relu", ["x"], ["h"], name="HUB")]
    nodes += [helper.make_node("Neg", ["h"], [f"s{i}"], name=f"SIDE{i}") for i in range(side_branches)]
    nodes += [
        helper.make_node("Sigmoid", ["h"], ["c0"], name="C0"),
        helper.make_node("Tanh", ["c0"], ["c1"], name="C1"),
        helper.make_node("Abs", ["c1"], ["y"], name="C2"),
    ]
    outputs = [f"s{i}" for i in range(side_branches)] + ["y"]
    return index_of(make_model(nodes, ["x"], outputs))


@pytest.mark.parametrize("mode", MODES)
def test_no_reduce_inputs_drops_side_branches_of_a_large_prefix(mode: str) -> None:
    """Polygraphy's --no-reduce-inputs result is the culprit's cone; a topological prefix carries
    the 20 side branches along and must not be the answer."""
    index = hub_model()
    result, _, _ = reduce_with(index, fails_with_all(["C1"]), mode, reduce_inputs=False)
    assert names_in(index, result.min_bad) == {"HUB", "C0", "C1"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("culprit", ["C1", "SIDE7", "HUB"])
def test_single_node_is_isolated_in_a_large_component(mode: str, culprit: str) -> None:
    index = hub_model()
    result, _, _ = reduce_with(index, fails_with_all([culprit]), mode)
    assert names_in(index, result.min_bad) == {culprit}


def relu_chain(length: int) -> GraphIndex:
    from onnx import helper

    from tests.models import make_model

    nodes = [helper.make_node("Relu", [f"t{i - 1}" if i else "x"], [f"t{i}"], name=f"n{i}") for i in range(length)]
    return index_of(make_model(nodes, ["x"], [f"t{length - 1}"]), shape_inference=False)


def residual_blocks(blocks: int) -> GraphIndex:
    """``a = Relu(x); t = Tanh(a); x = Add(x, t)`` per block: paths may take the skip (the Adds)."""
    from onnx import helper

    from tests.models import make_model

    nodes, x = [], "x"
    for i in range(blocks):
        nodes += [
            helper.make_node("Relu", [x], [f"a{i}"], name=f"b{i}/relu"),
            helper.make_node("Tanh", [f"a{i}"], [f"t{i}"], name=f"b{i}/tanh"),
            helper.make_node("Add", [x, f"t{i}"], [f"x{i}"], name=f"b{i}/add"),
        ]
        x = f"x{i}"
    return index_of(make_model(nodes, ["x"], [x]), shape_inference=False)


def reaches(index: GraphIndex, source: str, target: str) -> Callable[[set[str]], bool]:
    """Fails when ``target`` is reachable from ``source`` through the candidate's own nodes."""
    start, goal = node_index(index, source), node_index(index, target)

    def fails(present: set[str]) -> bool:
        inside = {i for i, node in enumerate(index.nodes) if node.name in present}
        return start in inside and goal in inside and goal in index.descendants([start], frozenset(inside))

    return fails


def polygraphy_bisect_then_linear(nodes: int, answer: int) -> int:
    """Polygraphy's bisect-then-linear on a chain whose answer is a contiguous run: a binary
    search per side, then one check per node of the run per side (its linear mode)."""
    return 2 * math.ceil(math.log2(nodes)) + 2 * answer


@pytest.mark.parametrize(("first", "last"), [(70, 129), (40, 160), (10, 189)])
def test_a_large_answer_costs_fewer_checks_than_polygraphy(first: int, last: int) -> None:
    """A failure that needs node ``first`` to reach node ``last`` on a 200-node chain: the answer is
    the whole run between them (30-90 % of the chain). ``auto`` narrows both ends by binary search
    and finishes with the 1-minimal sweep (about one check per node), where QuickXplain needed two
    per node plus the sweep (379 checks for 40..160, against Polygraphy's 258)."""
    index = relu_chain(200)
    result, checker, _ = reduce_with(index, reaches(index, f"n{first}", f"n{last}"), "auto")
    assert names_in(index, result.min_bad) == {f"n{i}" for i in range(first, last + 1)}
    answer = last - first + 1
    assert len(checker.seen) <= answer + 40
    assert len(checker.seen) < polygraphy_bisect_then_linear(200, answer)


def test_a_path_through_residual_blocks_is_found_with_the_sweep() -> None:
    """The path from block 5 to block 34 may skip every block's Relu/Tanh: the answer is b5's
    Relu and Tanh and the Adds of blocks 5-34 (32 nodes). Each side branch goes in one check."""
    index = residual_blocks(40)
    result, checker, _ = reduce_with(index, reaches(index, "b5/relu", "b34/add"), "auto")
    assert names_in(index, result.min_bad) == {"b5/relu", "b5/tanh"} | {f"b{i}/add" for i in range(5, 35)}
    assert len(checker.seen) <= 120  # QuickXplain's route took 178; Polygraphy's ~200


@pytest.mark.parametrize("culprits", [("n50", "n100", "n150"), ("n20", "n60", "n100", "n140", "n180")])
def test_needed_nodes_apart_are_isolated_alone(culprits: tuple[str, ...]) -> None:
    """Nodes needed together but not connected: the stretches between them go (QuickXplain), not
    only what the 1-minimal sweep can take from the ends."""
    index = relu_chain(200)
    result, _, _ = reduce_with(index, fails_with_all(culprits), "auto")
    assert names_in(index, result.min_bad) == set(culprits)


def test_the_sweep_removes_a_sink_hanging_off_a_needed_node() -> None:
    """n1 reads only n0's output and is not needed: removed with what becomes dead, n0 goes too
    and the failure with it; alone, n1 can go."""
    index = relu_chain(2)
    space = SearchSpace(index, index.all_nodes())
    sweep = one_minimal(space, Candidate(index.all_nodes()))
    proposals, verdict, result = [], None, None
    try:
        while True:
            candidate = sweep.send(verdict) if proposals else next(sweep)
            proposals.append(names_in(index, candidate))
            verdict = "n0" in names_in(index, candidate)
    except StopIteration as stop:
        result = stop.value
    assert names_in(index, result.nodes) == {"n0"}
    assert proposals == [{"n0"}]

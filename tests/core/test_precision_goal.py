"""``Goal.PASS`` sessions (``onnx-reducer precision``): the smallest node set whose treatment
(kept in fp32) makes the check pass, found by the reduction's own machine and strategies over node
sets that are not subgraphs (pure: an oracle stands in for the check)."""

from __future__ import annotations

from collections.abc import Collection

import pytest

from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.driver import drive
from reducer_core.errors import GoalUnreachableError
from reducer_core.graph import GraphIndex
from reducer_core.machine import ReductionMachine
from reducer_core.strategies import MODES, SearchSpace
from reducer_core.verdict import Goal, Verdict, VerdictKind
from tests.models import branchy_model, index_of, names_in

PASSES = Verdict(VerdictKind.PASS)
OVERFLOWS = Verdict(VerdictKind.FAIL, "mismatch:nonfinite")


@pytest.fixture(scope="module")
def branchy() -> GraphIndex:
    return index_of(branchy_model())


def passes_when_kept(index: GraphIndex, needed: Collection[str]) -> tuple[list[frozenset[str]], object]:
    """An oracle: the mixed model passes when every ``needed`` node is kept in fp32."""
    seen: list[frozenset[str]] = []

    def check(candidate: Candidate) -> Verdict:
        kept = frozenset(names_in(index, candidate))
        seen.append(kept)
        return PASSES if set(needed) <= kept else OVERFLOWS

    return seen, check


def machine(index: GraphIndex, mode: str = "auto") -> ReductionMachine:
    config = SessionConfig(mode=mode, goal=Goal.PASS)
    return ReductionMachine(index, config, VerdictCache(index.fingerprint, "precision-test"))


def run_to_end(m: ReductionMachine, check: object) -> None:
    drive(m, lambda request: check(request.candidate))  # type: ignore[operator, union-attr]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("needed", [{"E"}, {"B", "H"}, {"A", "F"}, {"C", "D", "G"}])
def test_the_answer_is_exactly_the_nodes_that_must_stay_fp32(branchy: GraphIndex, mode: str, needed: set[str]) -> None:
    seen, check = passes_when_kept(branchy, needed)
    m = machine(branchy, mode)
    run_to_end(m, check)
    assert names_in(branchy, m.result.min_bad) == needed
    assert seen[0] == frozenset()  # the original: the plain fp16 model
    assert seen[1] == frozenset(names_in(branchy, branchy.all_nodes()))  # then everything kept
    assert m.result.original.kind is VerdictKind.FAIL


def test_the_fp16_model_that_already_passes_needs_no_fp32_node(branchy: GraphIndex) -> None:
    seen, check = passes_when_kept(branchy, set())
    m = machine(branchy)
    run_to_end(m, check)
    assert m.result.min_bad == Candidate(frozenset())
    assert seen == [frozenset()]  # one check: nothing else to learn


def test_a_failure_that_stays_with_every_node_kept_is_no_precision_problem(branchy: GraphIndex) -> None:
    m = machine(branchy)
    with pytest.raises(GoalUnreachableError, match="even with all 8 nodes kept"):
        run_to_end(m, lambda candidate: OVERFLOWS)


def test_a_stopped_search_resumes_from_its_state_without_checking_again(branchy: GraphIndex) -> None:
    seen, check = passes_when_kept(branchy, {"B", "H"})
    first = machine(branchy)
    for _ in range(5):
        (request,) = first.next_requests(1)
        first.deliver(request, check(request.candidate))  # type: ignore[operator]
    state = first.state()
    assert state["config"]["goal"] == "pass"
    config = SessionConfig(goal=Goal.PASS)
    resumed = ReductionMachine.from_state(branchy, config, VerdictCache(branchy.fingerprint, "precision-test"), state)
    checked_before = len(seen)
    run_to_end(resumed, check)
    assert names_in(branchy, resumed.result.min_bad) == {"B", "H"}
    assert not set(seen[checked_before:]) & set(seen[:checked_before])  # nothing checked twice


def test_a_reduction_state_does_not_carry_the_goal(branchy: GraphIndex) -> None:
    """Sessions saved before goals existed keep resuming: the default goal is not saved."""
    assert "goal" not in SessionConfig().to_json()
    assert SessionConfig(goal=Goal.PASS).to_json() != SessionConfig().to_json()


def test_node_sets_that_are_not_subgraphs_lose_no_producer_with_a_removed_node(branchy: GraphIndex) -> None:
    everything = branchy.all_nodes()
    sink = max(everything)  # F: its producers C and H feed nothing else in the set once it goes
    assert SearchSpace(branchy, everything).dead_after_removing(everything, frozenset({sink})) != {sink}
    assert SearchSpace(branchy, everything, subgraphs=False).dead_after_removing(everything, frozenset({sink})) == {
        sink
    }

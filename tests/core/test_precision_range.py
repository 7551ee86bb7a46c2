"""The precision search's start from one reference run (``reducer_core.precision``): the writers and
readers of tensors beyond fp16's range, checked right after the fp16 model and minimised one node
at a time; a failure the superset does not cure falls back to the search from every node (pure:
an oracle stands in for the check)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.driver import drive
from reducer_core.graph import GraphIndex
from reducer_core.precision import PrecisionMachine, precision_machine, range_superset
from reducer_core.verdict import Goal, Verdict, VerdictKind
from tests.models import branchy_model, index_of, names_in

PASSES = Verdict(VerdictKind.PASS)
OVERFLOWS = Verdict(VerdictKind.FAIL, "mismatch:nonfinite")
# b (B's output, read by C and twice by E) and h (H's output, read by F) are beyond fp16's range
RANGES = {"a": 1.0, "b": 1e5, "c": 3.0, "e": 10.0, "g": 2.0, "h": 7e4, "out0": 0.5, "out1": 4.0}


@pytest.fixture(scope="module")
def branchy() -> GraphIndex:
    return index_of(branchy_model())


def machine(index: GraphIndex, superset: frozenset[int]) -> PrecisionMachine:
    config = SessionConfig(goal=Goal.PASS)
    made = precision_machine(superset)(index, config, VerdictCache(index.fingerprint, "range-test"))
    assert isinstance(made, PrecisionMachine)
    return made


def oracle(index: GraphIndex, needed: set[str], seen: list[set[str]]) -> Callable[[Candidate], Verdict]:
    def check(candidate: Candidate) -> Verdict:
        kept = names_in(index, candidate)
        seen.append(kept)
        return PASSES if needed <= kept else OVERFLOWS

    return check


def run(m: PrecisionMachine, check: Callable[[Candidate], Verdict]) -> None:
    drive(m, lambda request: check(request.candidate))  # type: ignore[union-attr]


def test_the_superset_is_every_writer_and_reader_of_an_out_of_range_tensor(branchy: GraphIndex) -> None:
    assert names_in(branchy, range_superset(branchy, RANGES)) == {"B", "C", "E", "H", "F"}
    assert range_superset(branchy, {name: 1.0 for name in RANGES}) == frozenset()


def test_a_passing_superset_is_minimised_with_one_check_per_node(branchy: GraphIndex) -> None:
    seen: list[set[str]] = []
    m = machine(branchy, range_superset(branchy, RANGES))
    run(m, oracle(branchy, {"B", "H"}, seen))
    assert names_in(branchy, m.result.min_bad) == {"B", "H"}
    assert seen[0] == set() and seen[1] == {"B", "C", "E", "H", "F"}
    assert [r.phase for r in m.result.iterations][:2] == ["original", "range"]
    assert m.result.checks_run == 2 + 5
    assert m.result.nodes_before == len(branchy.nodes)


def test_a_superset_that_does_not_pass_falls_back_to_every_node(branchy: GraphIndex) -> None:
    seen: list[set[str]] = []
    m = machine(branchy, range_superset(branchy, RANGES))
    run(m, oracle(branchy, {"A", "G"}, seen))  # a rounding failure: no overflow involved
    assert names_in(branchy, m.result.min_bad) == {"A", "G"}
    assert [r.phase for r in m.result.iterations][:3] == ["original", "range", "all-kept"]


def test_a_stopped_minimisation_resumes_without_checking_again(branchy: GraphIndex) -> None:
    seen: list[set[str]] = []
    check = oracle(branchy, {"B", "H"}, seen)
    superset = range_superset(branchy, RANGES)
    first = machine(branchy, superset)
    for _ in range(4):
        (request,) = first.next_requests(1)
        first.deliver(request, check(request.candidate))  # type: ignore[union-attr]
    config = SessionConfig(goal=Goal.PASS)
    cache = VerdictCache(branchy.fingerprint, "range-test")
    resumed = precision_machine(superset).from_state(branchy, config, cache, first.state())
    before = len(seen)
    drive(resumed, lambda request: check(request.candidate))  # type: ignore[union-attr]
    assert names_in(branchy, resumed.result.min_bad) == {"B", "H"}
    assert len(seen) - before == 7 - 4


def test_a_resumed_session_starts_from_the_saved_superset_not_a_new_range_run(branchy: GraphIndex) -> None:
    """Another process's reference run may round differently near 65,504: the state keeps the set."""
    seen: list[set[str]] = []
    check = oracle(branchy, {"B", "H"}, seen)
    first = machine(branchy, range_superset(branchy, RANGES))
    for _ in range(3):
        (request,) = first.next_requests(1)
        first.deliver(request, check(request.candidate))  # type: ignore[union-attr]
    config = SessionConfig(goal=Goal.PASS)
    cache = VerdictCache(branchy.fingerprint, "range-test")
    other = precision_machine(frozenset()).from_state(branchy, config, cache, first.state())
    assert isinstance(other, PrecisionMachine) and other.superset == first.superset
    before = len(seen)
    drive(other, lambda request: check(request.candidate))  # type: ignore[union-attr]
    assert names_in(branchy, other.result.min_bad) == {"B", "H"}
    assert len(seen) - before == 7 - 3

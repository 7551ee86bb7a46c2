"""Speculative evaluation (pure, no I/O): checking several candidates per round never changes the
answer of a deterministic check, and it takes fewer rounds (wall time, when checks cost the same)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from onnx import helper

from reducer_core.candidate import Candidate
from reducer_core.graph import GraphIndex
from reducer_core.strategies import MODES, SearchSpace, Strategy
from reducer_core.strategies.base import Observation
from reducer_core.strategies.speculation import BUDGET, CulpritModel, gambles_allowed, speculate
from tests.core.test_properties import PROPERTY_SETTINGS, RandomDag, dag_and_culprits, monotone, non_monotone
from tests.models import BRANCHY_NODES, branchy_model, index_of, make_model, names_in

Fails = Callable[[set[str]], bool]


def chain_index(length: int) -> GraphIndex:
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i in range(length)]
    return index_of(make_model(nodes, ["t0"], [f"t{length}"]))


@dataclass
class Run:
    """A reduction driven in rounds of ``slots`` checks that all take the same time."""

    best: frozenset[int]
    rounds: int
    checks: int
    main_line: list[str] = field(default_factory=list)


def run_in_rounds(index: GraphIndex, fails: Fails, mode: str, slots: int, budget: float = BUDGET) -> Run:
    """The original is checked in the first round (with ``slots - 1`` speculative checks beside it,
    as if it failed, which it does here); ``budget``: at most that many checks per verdict the
    strategy used, plus the slots."""
    strategy = Strategy(SearchSpace(index, index.all_nodes()), mode)
    verdicts: dict[str, Observation] = {}
    model = CulpritModel.start(index.all_nodes())
    rounds = 0 if slots > 1 else 1
    checks = 1
    main_line: list[str] = []
    while True:
        while (pending := strategy.propose()) is not None and pending.fingerprint in verdicts:
            main_line.append(pending.fingerprint)
            strategy.observe(pending, *verdicts[pending.fingerprint])
        if pending is None:
            return Run(strategy.best_bad.nodes, rounds, checks, main_line)
        free = slots - 1 if rounds == 0 else slots
        gambles = gambles_allowed(checks, len(main_line), slots, budget)
        batch = speculate(strategy, lambda c: verdicts.get(c.fingerprint), (), free, model, gambles)
        assert batch[0] == pending, "the strategy's own proposal is checked first"
        assert len(batch) <= free
        rounds += 1
        for candidate in batch:
            assert candidate.fingerprint not in verdicts, "a known candidate was checked again"
            checks += 1
            reproduced = fails(names_in(index, candidate))
            verdicts[candidate.fingerprint] = (reproduced, not reproduced)
            model = model.learn(candidate.nodes, reproduced)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("slots", [2, 4, 8])
@pytest.mark.parametrize("culprits", [("C",), ("F",), ("A", "H"), ("B", "G"), ("C", "E", "H")])
def test_parallel_answer_equals_sequential_on_a_branchy_model(mode: str, slots: int, culprits: tuple[str, ...]) -> None:
    index = index_of(branchy_model())
    fails = monotone(frozenset(culprits))
    sequential = run_in_rounds(index, fails, mode, 1)
    parallel = run_in_rounds(index, fails, mode, slots)
    assert parallel.best == sequential.best
    assert parallel.main_line == sequential.main_line, "the strategy saw the same candidates in the same order"
    assert parallel.rounds <= sequential.rounds


@PROPERTY_SETTINGS
@given(case=dag_and_culprits())
@pytest.mark.parametrize("mode", MODES)
def test_parallel_answer_equals_sequential_on_random_dags(case: tuple[RandomDag, frozenset[str]], mode: str) -> None:
    dag, culprits = case
    index = index_of(dag.model)
    full = frozenset(dag.names)
    for fails in (monotone(culprits), non_monotone(culprits, full, salt=7)):
        sequential = run_in_rounds(index, fails, mode, 1)
        parallel = run_in_rounds(index, fails, mode, 4)
        assert parallel.best == sequential.best
        assert parallel.main_line == sequential.main_line


@pytest.mark.parametrize("mode", MODES)
def test_checks_stay_within_the_budget(mode: str) -> None:
    index = chain_index(64)
    for culprit in (3, 30, 61):
        sequential = run_in_rounds(index, monotone(frozenset({f"n{culprit}"})), mode, 1)
        parallel = run_in_rounds(index, monotone(frozenset({f"n{culprit}"})), mode, 8)
        assert parallel.checks <= 2 * (sequential.checks + 1)


def test_single_culprits_take_under_half_the_rounds_with_four_slots() -> None:
    """Rounds, not seconds: with checks of equal cost, wall time is proportional to rounds."""
    index = chain_index(200)
    culprits = [7, 52, 99, 140, 188]
    sequential = sum(run_in_rounds(index, monotone(frozenset({f"n{c}"})), "auto", 1).rounds for c in culprits)
    four = sum(run_in_rounds(index, monotone(frozenset({f"n{c}"})), "auto", 4).rounds for c in culprits)
    eight = sum(run_in_rounds(index, monotone(frozenset({f"n{c}"})), "auto", 8).rounds for c in culprits)
    assert four <= sequential / 2
    assert eight < four


def test_a_known_candidate_is_followed_without_a_slot() -> None:
    index = index_of(branchy_model())
    strategy = Strategy(SearchSpace(index, index.all_nodes()), "bisect")
    first = strategy.propose()
    assert first is not None
    known = {first.fingerprint: (True, False)}
    batch = speculate(strategy, lambda c: known.get(c.fingerprint), (), 3, CulpritModel(None), 3)
    assert first not in batch
    follower = strategy.fork([(True, False)]).propose()
    assert batch[0] == follower


def test_busy_candidates_take_no_slot_but_their_futures_do() -> None:
    index = index_of(branchy_model())
    strategy = Strategy(SearchSpace(index, index.all_nodes()), "bisect")
    first = strategy.propose()
    assert first is not None
    batch = speculate(strategy, lambda c: None, {first.fingerprint}, 2, CulpritModel(None), 2)
    assert first not in batch
    assert set(batch) <= {strategy.fork([(True, False)]).propose(), strategy.fork([(False, True)]).propose()}
    assert len(batch) == 2


def test_fork_leaves_the_strategy_alone_and_replays_the_same_position() -> None:
    index = index_of(branchy_model())
    strategy = Strategy(SearchSpace(index, index.all_nodes()), "auto")
    for _ in range(3):
        pending = strategy.propose()
        assert pending is not None
        strategy.observe(pending, "C" in names_in(index, pending))
    before = strategy.propose()
    fork = strategy.fork([(False, True)])
    assert strategy.propose() == before
    assert fork.state()["observations"][:3] == strategy.state()["observations"]
    assert len(fork.state()["observations"]) == 4


def test_the_culprit_model_learns_and_gives_up_on_contradictions() -> None:
    model = CulpritModel.start(frozenset(range(8)))
    model = model.learn(frozenset({0, 1, 2, 3}), True).learn(frozenset({0, 1}), False)
    assert model.support == frozenset({2, 3})
    assert model.chance(frozenset({2, 5})) == 0.5
    assert model.learn(frozenset({2, 3}), False).support is None  # no single node can explain it
    assert CulpritModel(None).chance(frozenset({1})) is None


def test_every_branchy_node_is_isolated_in_parallel() -> None:
    index = index_of(branchy_model())
    for culprit in BRANCHY_NODES:
        run = run_in_rounds(index, monotone(frozenset({culprit})), "auto", 4)
        assert names_in(index, Candidate(run.best)) == {culprit}

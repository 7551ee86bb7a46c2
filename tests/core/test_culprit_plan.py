"""Rounds planned from the single-culprit model (``reducer_core.strategies.culprit_plan``): level
probes learn several levels of the search per round, so one culprit takes fewer rounds of K checks,
with the sequential answer. Rounds, not seconds: with checks of equal cost, wall time follows them."""

from __future__ import annotations

import pytest

from reducer_core.strategies import SearchSpace, Strategy
from reducer_core.strategies.culprit_plan import plan_round
from reducer_core.strategies.speculation import CulpritModel
from tests.core.test_properties import monotone
from tests.core.test_speculation import chain_index, run_in_rounds
from tests.models import names_in

CULPRITS = range(0, 200, 7)


@pytest.fixture(scope="module")
def sequential() -> dict[int, tuple[frozenset[int], list[str], int]]:
    index = chain_index(200)
    runs = {c: run_in_rounds(index, monotone(frozenset({f"n{c}"})), "auto", 1) for c in CULPRITS}
    return {c: (run.best, run.main_line, run.rounds) for c, run in runs.items()}


@pytest.mark.parametrize(("slots", "most", "mean"), [(4, 4, 3.8), (8, 3, 2.25)])
def test_single_culprits_take_fewer_rounds_with_the_same_answer(
    sequential: dict[int, tuple[frozenset[int], list[str], int]], slots: int, most: int, mean: float
) -> None:
    """Before the plan (a tree of futures, then bit-plane probes), every culprit of a 200-node
    chain took 4 rounds with 4 slots and all but a few 3 with 8 (means 4.0 and 2.9); now 4 slots
    take 3 for about a third of the culprits (the search ends in the round that learns its last
    level) and 8 slots take 2 for most."""
    index = chain_index(200)
    rounds = []
    for culprit in CULPRITS:
        run = run_in_rounds(index, monotone(frozenset({f"n{culprit}"})), "auto", slots)
        best, main_line, sequential_rounds = sequential[culprit]
        assert run.best == best
        assert run.main_line == main_line, "the strategy saw the same candidates in the same order"
        assert run.rounds <= min(most, sequential_rounds // 2)
        rounds.append(run.rounds)
    assert sum(rounds) / len(rounds) <= mean


def test_level_probes_make_the_next_levels_sure() -> None:
    """Round one (three slots beside the original): the strategy's next check and two level
    probes. Their verdicts settle the levels after it: in round two the strategy's next two
    proposals are planned as sure checks, in the order the strategy then asks for them."""
    index = chain_index(200)
    culprit = 131
    strategy = Strategy(SearchSpace(index, index.all_nodes()), "auto")
    support = index.all_nodes()
    first = plan_round(strategy, lambda c: None, (), support, 3).picks
    assert [chance for _, chance in first] == [1.0, 0.0, 0.0]
    assert first[0][0] == strategy.propose()
    model = CulpritModel.start(support)
    verdicts: dict[str, tuple[bool, bool]] = {}
    for candidate, _ in first:
        verdicts[candidate.fingerprint] = (culprit in candidate.nodes, culprit not in candidate.nodes)
        model = model.learn(candidate.nodes, culprit in candidate.nodes)
    assert model.support is not None and len(model.support) <= 200 // 8 + 1
    pending = strategy.propose()
    assert pending is not None
    strategy.observe(pending, *verdicts[pending.fingerprint])
    second = plan_round(strategy, lambda c: verdicts.get(c.fingerprint), (), model.support, 4).picks
    sure = [candidate for candidate, chance in second if chance == 1.0]
    assert len(sure) >= 3
    for candidate in sure[:2]:
        assert strategy.propose() == candidate
        strategy.observe(candidate, culprit in candidate.nodes, culprit not in candidate.nodes)
    assert names_in(index, strategy.best_bad) >= {f"n{culprit}"}

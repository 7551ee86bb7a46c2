"""Speculative evaluation: which candidates to check now when several checks can run at once.

A strategy is a deterministic step machine, so its future is a binary tree: after the verdict on
the pending candidate (reproduces or not) it proposes one of two next candidates, and so on.
``speculate`` picks the tree nodes most likely to be needed, best first by the probability of the
path that leads to them (speculative bisection; on a phase whose proposals mostly pass, such as
ddmin's complements or the 1-minimal sweep, the tree degenerates into the "nothing reproduces"
line, which is picire's parallel ddmin). Candidates whose verdict is known are followed without
a slot; candidates already being checked take no new slot, but the tree grows under them.

Probabilities come from a :class:`CulpritModel`: while every verdict so far is consistent with a
single culprit node, the chance that a candidate reproduces is the share of the still-possible
culprits it holds; otherwise, the rate of reproducing verdicts seen in the proposal's phase. While
the single-culprit model holds, every possible culprit's future is known and the round is planned
from them instead of the tree (``culprit_plan.plan_round``): the checks every culprit agrees on,
the next uncertain one, then *level probes*, group tests whose verdicts are those of the
strategy's next uncertain checks, so that the next round runs them as sure checks (or, when they
can end the search this round, the likeliest candidates left).

The strategy itself only ever consumes real verdicts on its own pending proposal, so with a
deterministic check the answer is identical to a sequential run: speculative verdicts land in the
verdict cache and are read back when (if) the strategy gets there. Hypothetical futures are
explored on copies of the strategy (``Strategy.fork``), never on the strategy itself.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from reducer_core.candidate import Candidate
from reducer_core.strategies.base import Observation, Strategy
from reducer_core.strategies.culprit_plan import FAILS, PASSES, plan_round

Known = Callable[[Candidate], Observation | None]
"""The known outcome of a candidate, ``(reproduces, clean pass)``, or None when unknown."""

MAX_DEPTH = 16
LIKELY = 0.75
"""A candidate at least this likely to be needed is no gamble: it costs no wasted check on average."""
BUDGET = 1.75
"""Checks per verdict the strategy uses that speculation may spend in total (plus one round of
slots): simulated on 200-node chains (every third node the culprit), single culprits take 0.41
of the sequential rounds with 4 slots and 0.23 with 8, for 1.5x and 1.7x the checks (with the
round plan of ``culprit_plan``; 0.44 and 0.32, 1.65x and 1.9x before it)."""


@dataclass(frozen=True)
class CulpritModel:
    """The nodes that could alone be the culprit, given every verdict so far (None once the
    verdicts contradict a single monotone culprit: several nodes are needed together, or none)."""

    support: frozenset[int] | None

    @classmethod
    def start(cls, nodes: frozenset[int]) -> CulpritModel:
        return cls(nodes)

    def learn(self, nodes: frozenset[int], reproduced: bool) -> CulpritModel:
        if self.support is None:
            return self
        support = self.support & nodes if reproduced else self.support - nodes
        return CulpritModel(support or None)

    def learn_all(self, facts: Iterable[tuple[frozenset[int], bool]]) -> CulpritModel:
        model = self
        for nodes, reproduced in facts:
            model = model.learn(nodes, reproduced)
        return model

    def chance(self, nodes: frozenset[int]) -> float | None:
        """The chance that ``nodes`` reproduces, or None when the model has no opinion."""
        if self.support is None:
            return None
        return len(self.support & nodes) / len(self.support)


def phase_rate(strategy: Strategy, phase: str) -> float:
    """The chance that a proposal of ``phase`` reproduces, from the verdicts seen in that phase so
    far (Laplace's rule: an unseen phase counts as a coin toss)."""
    seen = [reproduced for observed, reproduced in strategy.outcomes if observed == phase]
    return (sum(seen) + 1) / (len(seen) + 2)


@dataclass(order=True)
class _Branch:
    """A node of the tree of futures: the strategy after ``path`` (a fork, built when needed)."""

    neg_probability: float
    tie: int
    path: tuple[Observation, ...] = field(compare=False)
    model: CulpritModel = field(compare=False)
    strategy: Strategy | None = field(default=None, compare=False)

    @property
    def probability(self) -> float:
        return -self.neg_probability


@dataclass
class _Search:
    strategy: Strategy
    known: Known
    busy: Collection[str]
    slots: int
    gambles: int
    chosen: dict[str, Candidate] = field(default_factory=dict)
    heap: list[_Branch] = field(default_factory=list)
    ties: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def push(self, probability: float, path: tuple[Observation, ...], model: CulpritModel, at: Strategy | None) -> None:
        heapq.heappush(self.heap, _Branch(-probability, next(self.ties), path, model, at))

    def take(self, candidate: Candidate, probability: float) -> None:
        """Take a slot for ``candidate`` unless known, busy or taken; a gamble (less likely needed
        than not) also takes one of the gambles allowed."""
        if not candidate.nodes or candidate.fingerprint in self.busy or candidate.fingerprint in self.chosen:
            return
        if self.known(candidate) is not None:
            return
        if probability < LIKELY:
            if self.gambles <= 0:
                return
            self.gambles -= 1
        self.chosen[candidate.fingerprint] = candidate

    def grow(self, model: CulpritModel) -> None:
        """Best-first over the tree until the slots are taken (or the likely part is exhausted)."""
        self.push(1.0, (), model, self.strategy.fork())
        while self.heap and len(self.chosen) < self.slots:
            branch = heapq.heappop(self.heap)
            if self.chosen and not self._worth(branch):
                return
            if branch.probability < LIKELY and self.gambles <= 0:
                return  # nothing left can be taken: every branch left is a gamble, and none are allowed
            self._expand(branch)

    def _worth(self, branch: _Branch) -> bool:
        """Whether ``branch`` (and so every branch left, none is likelier) may still get a slot."""
        if branch.probability >= LIKELY:
            return True
        return self.gambles > 0

    def _expand(self, branch: _Branch) -> None:
        position = branch.strategy or self.strategy.fork(branch.path)
        candidate = position.propose()
        if candidate is None:
            return
        outcome = self.known(candidate)
        if outcome is not None:  # no slot needed: follow the known verdict
            position.observe(candidate, *outcome)
            self.push(
                branch.probability, (*branch.path, outcome), branch.model.learn(candidate.nodes, outcome[0]), position
            )
            return
        self.take(candidate, branch.probability)
        if len(branch.path) >= MAX_DEPTH:
            return
        chance = branch.model.chance(candidate.nodes)
        p = phase_rate(self.strategy, position.phase) if chance is None else chance
        passing, failing = (*branch.path, PASSES), (*branch.path, FAILS)
        self.push(branch.probability * (1 - p), passing, branch.model.learn(candidate.nodes, False), None)
        position.observe(candidate, *FAILS)
        self.push(branch.probability * p, failing, branch.model.learn(candidate.nodes, True), position)


def gambles_allowed(checks: int, used: int, slots: int, factor: float = BUDGET) -> int:
    """How many more less-likely-than-not checks keep the total near ``factor`` times the verdicts
    the strategy used so far (``used``), with one round of ``slots`` as slack. ``checks``: checks
    started so far, speculative ones included."""
    return max(0, int(factor * used) + slots - checks)


def speculate(
    strategy: Strategy, known: Known, busy: Collection[str], slots: int, model: CulpritModel, gambles: int
) -> list[Candidate]:
    """Up to ``slots`` candidates worth checking now, the strategy's own pending proposal first
    (when it needs a check), then the round ``culprit_plan`` plans while a single culprit explains
    every verdict, else the likeliest futures of the tree. ``busy``: fingerprints of the
    candidates being checked now; ``model``: what every verdict so far says about a culprit;
    ``gambles``: how many of the candidates may be less likely needed than not (probes included),
    the caller's bound on wasted checks."""
    search = _Search(strategy, known, busy, slots, gambles)
    if model.support is not None:  # every culprit's future is known: plan the round (``culprit_plan``)
        for candidate, chance in plan_round(strategy, known, busy, model.support, slots).picks:
            if len(search.chosen) >= slots:
                break
            search.take(candidate, chance)
        return list(search.chosen.values())
    search.grow(model)
    return list(search.chosen.values())

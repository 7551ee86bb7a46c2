"""Checks asked ahead of the flow: when a driver has spare slots, which candidates the machine asks
for before the flow needs them (``reducer_core.strategies.speculation``), and the verdicts that came
back for them, kept until the flow reaches their candidates.

Speculation only follows the strategy: while the flow waits for the strategy's own proposal (or
for the original's verdict with the reduction next), never for a flaky check (one run settles
nothing once passes need repeats). Each ahead verdict is a fact the culprit model learns from.
"""

from __future__ import annotations

from collections.abc import Collection

from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.data_ahead import speculate_sizes
from reducer_core.data_reduction import PHASE as DATA_PHASE
from reducer_core.flow import CheckStep, ReductionFlow, Step
from reducer_core.strategies.base import Observation
from reducer_core.strategies.speculation import CulpritModel, gambles_allowed, speculate
from reducer_core.verdict import Goal


class AheadChecks:
    """The speculation of one session: ``waiting`` holds the fingerprints checked ahead whose
    verdicts the flow has not consumed yet (saved with the session's state)."""

    def __init__(self, flow: ReductionFlow, cache: VerdictCache) -> None:
        self.flow = flow
        self.cache = cache
        self.waiting: set[str] = set()
        self._facts: list[tuple[frozenset[int], bool]] = []

    def allowed(self, step: Step | None) -> bool:
        """Whether speculation may follow the strategy now: the flow waits (``step``) for the
        strategy's own proposal, or for the original's verdict when the reduction comes next
        (speculating that the original fails, as it must for a reduction to happen)."""
        flow = self.flow
        if isinstance(step, CheckStep) and step.phase == DATA_PHASE and not step.repeat:
            search = flow.data_search  # the data step: its next sizes
            return search is not None and search.propose() == step.candidate
        if not isinstance(step, CheckStep) or flow.found is not None or step.repeat:
            return False
        if flow.flakiness.flaky:
            return False  # a speculative verdict is one run: not worth a slot once passes need repeats
        if flow.original is None:  # a Goal.PASS session checks the whole set next, not the strategy's proposal
            return not flow.config.localize and flow.config.goal is Goal.FAILURE
        return step.candidate == flow.strategy.propose()

    def choose(self, slots: int, busy: Collection[str], checks: int, k: int) -> list[Candidate]:
        """Up to ``slots`` candidates to check ahead, none whose fingerprint is ``busy`` (being
        checked or asked for); ``checks``: the checks run and running, ``k``: the slots in all."""
        strategy = self.flow.strategy
        gambles = gambles_allowed(checks, len(strategy.facts) + self.flow.data_outcomes, k)
        search = self.flow.data_search
        if search is not None:
            return speculate_sizes(search, self._known_size, self.flow.data_search_after, busy, slots, gambles)
        model = CulpritModel.start(strategy.space.start).learn_all([*strategy.facts, *self._facts])
        return speculate(strategy, self._known, busy, slots, model, gambles)

    def keep(self, candidate: Candidate, reproduces: bool) -> None:
        """A verdict checked ahead came back: kept until the flow reaches ``candidate``."""
        self.waiting.add(candidate.fingerprint)
        if not candidate.data:  # a size says nothing about a culprit node
            self._facts.append((candidate.nodes, reproduces))

    def answers(self, step: CheckStep) -> bool:
        """Whether a verdict checked ahead answers ``step`` (a first run the flow waits for)."""
        return step.repeat == 0 and step.candidate.fingerprint in self.waiting

    def _known_size(self, candidate: Candidate) -> bool | None:
        verdict = self.cache.peek(candidate)
        return None if verdict is None else self.flow.reproduces_in(DATA_PHASE, verdict)

    def _known(self, candidate: Candidate) -> Observation | None:
        verdict = self.cache.peek(candidate)
        if verdict is None:
            return None
        return self.flow.reproduces(verdict), self.flow.clean_miss(verdict)

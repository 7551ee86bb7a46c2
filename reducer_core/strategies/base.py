"""Step-machine wrapper around generator-based search algorithms.

An algorithm is a generator that yields candidates and receives ``True`` when the candidate
reproduces the failure. The wrapper adds what every strategy needs: the best failing and closest
passing candidates, empty candidates answered without a check, and a JSON state made of the
observations so far. Algorithms are deterministic, so ``Strategy.from_state`` replays the
observations to rebuild the exact same position without running a single check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reducer_core.candidate import Candidate
from reducer_core.errors import ReplayMismatchError, UsageError
from reducer_core.strategies.bisect import bisect_search, linear_search
from reducer_core.strategies.minimize import auto_search, minimize_search
from reducer_core.strategies.space import SearchSpace
from reducer_core.strategies.tracker import Algorithm, Tracker

Observation = tuple[bool, bool]
"""What a strategy learns from a verdict: (reproduces the failure, clean pass)."""

ALGORITHMS: dict[str, Algorithm] = {
    "bisect": bisect_search,
    "linear": linear_search,
    "minimize": minimize_search,
    "auto": auto_search,
}


MODES = ("auto", "bisect", "linear", "minimize")


class Strategy:
    """``propose()`` the next candidate (None when done), ``observe()`` its verdict, read ``best_bad``."""

    def __init__(self, space: SearchSpace, mode: str) -> None:
        if mode not in MODES:
            raise UsageError(f"Unknown mode '{mode}'. Choose one of: {', '.join(MODES)}.")
        self.space = space
        self.mode = mode
        self.tracker = Tracker(Candidate(space.start))
        self._observations: list[tuple[Candidate, bool, bool]] = []
        self.outcomes: list[tuple[str, bool]] = []
        """(phase, reproduced) of every observation, in order (speculation estimates rates from it)."""
        self._search = ALGORITHMS[mode](space, self.tracker)
        self._pending: Candidate | None = None
        self._done = False
        self._advance(None)

    def _advance(self, failed: bool | None) -> None:
        try:
            while True:
                proposal = next(self._search) if failed is None else self._search.send(failed)
                if proposal.nodes:
                    self._pending = proposal
                    return
                failed = False  # an empty model reproduces nothing: answer without a check
        except StopIteration:
            self._pending = None
            self._done = True

    @property
    def phase(self) -> str:
        return self.tracker.phase

    def propose(self) -> Candidate | None:
        return self._pending

    def observe(self, candidate: Candidate, failed: bool, passed: bool | None = None) -> None:
        """Record whether ``candidate`` reproduces the failure; ``passed`` (default: not failed)
        says whether it was a clean pass, eligible as the min-good model."""
        if candidate != self._pending:
            raise ReplayMismatchError("observe() was given a candidate that is not the pending proposal.")
        clean = (not failed) if passed is None else passed and not failed
        self.tracker.record(candidate, failed, clean)
        self._observations.append((candidate, failed, clean))
        self.outcomes.append((self.phase, failed))
        self._advance(failed)

    @property
    def facts(self) -> list[tuple[frozenset[int], bool]]:
        """(nodes, reproduced) of every observation, in order."""
        return [(candidate.nodes, failed) for candidate, failed, _ in self._observations]

    def fork(self, then: Sequence[Observation] = ()) -> Strategy:
        """A copy at the same position, rebuilt by replaying the observations (the engine is
        deterministic), then advanced by the hypothetical outcomes ``then``."""
        copy = Strategy(self.space, self.mode)
        for _, failed, passed in self._observations:
            copy._observe_pending(failed, passed)
        for failed, passed in then:
            copy._observe_pending(failed, passed)
        return copy

    def _observe_pending(self, failed: bool, passed: bool) -> None:
        pending = self.propose()
        if pending is None:
            raise ReplayMismatchError("fork() replayed past the end of the search.")
        self.observe(pending, failed, passed)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def best_bad(self) -> Candidate:
        return self.tracker.best_bad

    @property
    def best_good(self) -> Candidate | None:
        return self.tracker.closest_good()

    def state(self) -> dict[str, Any]:
        return {
            "version": 1,
            "mode": self.mode,
            "graph": self.space.index.fingerprint,
            "start": sorted(self.space.start),
            "observations": [[c.fingerprint, failed, passed] for c, failed, passed in self._observations],
        }

    @classmethod
    def from_state(cls, space: SearchSpace, state: dict[str, Any]) -> Strategy:
        if state.get("graph") != space.index.fingerprint or sorted(space.start) != state.get("start"):
            raise ReplayMismatchError("The saved strategy state belongs to a different model or start set.")
        strategy = cls(space, str(state["mode"]))
        for fingerprint, failed, *passed in state["observations"]:
            pending = strategy.propose()
            if pending is None or pending.fingerprint != fingerprint:
                raise ReplayMismatchError("The saved strategy state diverges from this engine's proposals.")
            strategy.observe(pending, bool(failed), bool(passed[0]) if passed else None)
        return strategy

"""What every search algorithm shares: the ``Search`` generator type and the ``Tracker`` of verdicts.

Split from ``base`` so the algorithms (``bisect``, ``minimize``) and the ``Strategy`` wrapper that
picks among them import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from reducer_core.candidate import Candidate
from reducer_core.strategies.space import SearchSpace

Search = Generator[Candidate, bool, None]
Algorithm = Callable[[SearchSpace, "Tracker"], Search]


class Tracker:
    """What the algorithms know about verdicts seen so far (shared with the wrapper)."""

    def __init__(self, start: Candidate) -> None:
        self.best_bad = start
        self.good: list[Candidate] = []
        self.phase = "start"

    def record(self, candidate: Candidate, failed: bool, passed: bool) -> None:
        """``passed`` is a clean pass: only those can be the min-good model (a crash, timeout or
        different failure does not reproduce the failure, but is no good model either)."""
        if failed:
            if len(candidate) <= len(self.best_bad):
                self.best_bad = candidate
        elif passed:
            self.good.append(candidate)

    def closest_good(self) -> Candidate | None:
        """Polygraphy's rule: the largest passing candidate smaller than the best bad one, else
        the smallest larger one; ties go to the one sharing most nodes with the best bad one."""
        if not self.good:
            return None
        size = len(self.best_bad)
        overlap = self.best_bad.nodes
        smaller = [g for g in self.good if len(g) < size and g.nodes]
        if smaller:
            return max(smaller, key=lambda g: (len(g), len(g.nodes & overlap)))
        larger = [g for g in self.good if len(g) >= size]
        return min(larger, key=lambda g: (len(g), -len(g.nodes & overlap))) if larger else None

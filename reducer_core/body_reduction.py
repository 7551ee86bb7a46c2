"""The second level of hierarchical delta debugging: once the outer graph is minimal, reduce the
bodies of the Loop and If nodes left in it.

Every body node of those nodes, nested bodies included, is one element of a flattened space
(``bodies.Flattened``: a body's nodes in order, a nested body's nodes right after its
control-flow node, indexed as a graph), and the session's own strategy (same mode: descent or
bisect, then the 1-minimal sweep) runs over it unchanged. A strategy's candidate (the body nodes
kept) becomes a candidate of the outer graph with the same outer nodes and the others removed
(``Candidate.body``); keeping a nested node keeps the control-flow node that holds it. When
the answer is one control-flow node whose remaining body nodes read no iteration state, one more
check tries them out of the body, as a plain subgraph (``"N/inline"``).

A step machine like the strategies (``propose``/``observe``/``best_bad``), deterministic: the
session replays it from the verdict cache like the rest of its flow.
"""

from __future__ import annotations

from reducer_core import bodies
from reducer_core.candidate import Candidate
from reducer_core.graph import GraphIndex
from reducer_core.strategies import SearchSpace, Strategy

INLINE_LIMIT = 3
"""Body nodes at most left for the inlined form to be tried."""


class BodySearch:
    def __init__(self, index: GraphIndex, outer: Candidate, mode: str) -> None:
        self.index = index
        self.outer = outer
        self.flat = bodies.Flattened.build(bodies.plan_for(index), outer.nodes)
        movable = self.flat.index.all_nodes() - self.flat.fixed
        self.strategy = Strategy(SearchSpace(self.flat.index, movable), mode)
        self._pending: tuple[Candidate, Candidate] | None = None  # (the strategy's, handed out)
        self._inline: Candidate | None = None
        self._inline_tried = False
        self._inline_seen = False
        self._inline_failed = False
        self._any_failed = False  # whether a candidate of this search reproduced the failure

    @classmethod
    def start(cls, index: GraphIndex, outer: Candidate, mode: str) -> BodySearch | None:
        """A search over the bodies of ``outer``'s control-flow nodes; None when none has a body
        node that could go (or ``outer`` has body edits already). A primary node (bisect's
        frozen side branches) is dropped in the body's candidates: their boundary tensors are
        graph inputs; until one of them fails, the answer stays ``outer``."""
        if outer.body:
            return None
        if not any(bodies.body_attrs(index.nodes[n]) for n in outer.nodes):
            return None
        search = cls(index, outer, mode)
        if len(search.flat.elements) == len(search.flat.fixed):
            return None
        return search

    @property
    def phase(self) -> str:
        return "body-extract" if self.strategy.done else f"body-{self.strategy.phase}"

    def _translate(self, kept: Candidate) -> Candidate:
        return Candidate(self.outer.nodes, None, self.flat.removed(kept.nodes))

    def propose(self) -> Candidate | None:
        proposal = self.strategy.propose()
        if proposal is not None:
            translated = self._translate(proposal)
            self._pending = (proposal, translated)
            return translated
        self._pending = None
        if not self._inline_tried:
            self._inline_tried = True
            self._inline = self._inline_candidate()
        return None if self._inline_seen else self._inline

    def _inline_candidate(self) -> Candidate | None:
        """The answer's body nodes out of the body: one control-flow node, at most
        ``INLINE_LIMIT`` body nodes left, none reading iteration state."""
        best = self.best_bad
        if len(best.nodes) != 1 or not best.body:
            return None
        (top,) = best.nodes
        if bodies.kept_count(self.index, top, best.body) > INLINE_LIMIT:
            return None
        if not bodies.inlinable(self.index, top, best.body):
            return None
        return Candidate(best.nodes, None, best.body | {bodies.inline_id(top)})

    def observe(self, candidate: Candidate, failed: bool, passed: bool) -> None:
        if self._pending is not None and candidate == self._pending[1]:
            self.strategy.observe(self._pending[0], failed, passed)
            self._any_failed = self._any_failed or failed
            return
        if self._inline is not None and candidate == self._inline:
            self._inline_seen = True
            self._inline_failed = failed
            return
        raise ValueError("observe() was given a candidate that is not the pending proposal")

    @property
    def best_bad(self) -> Candidate:
        if self._inline_failed and self._inline is not None:
            return self._inline
        return self._translate(self.strategy.best_bad) if self._any_failed else self.outer

    @property
    def best_good(self) -> Candidate | None:
        good = self.strategy.best_good
        return self._translate(good) if good is not None else None

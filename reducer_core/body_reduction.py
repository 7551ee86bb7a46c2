"""The second level of hierarchical delta debugging: once the outer graph is minimal, reduce the
bodies of the Loop and If nodes left in it.

Every body node of those nodes, nested bodies included, is one element of a flattened space
(``bodies.Flattened``: a body's nodes in order, a nested body's nodes right after its
control-flow node, indexed as a graph), and the session's own strategy (same mode: descent or
bisect, then the 1-minimal sweep) runs over it unchanged. A strategy's candidate (the body nodes
kept) becomes a candidate of the outer graph with the same outer nodes and the others removed
(``Candidate.body``); keeping a nested node keeps the control-flow node that holds it. When
the answer is one control-flow node whose remaining body nodes read no iteration state, one more
check tries them out of the body, as a plain subgraph (``"N/inline"``); a proposal that keeps a
single body node is asked in that form first, and its verdict answers for the proposal. When no
inlined form failed (the failure needs iteration state), the search starts again inside its
answer without them, so the answer is what the plain candidates say.

When the strategy's answer keeps one body node and no candidate passed (which would say that
bodies without it pass too), one more check tries the bodies without it (a strategy never
proposes an empty set; a node nothing reads may be all that is left): bodies left empty that
still fail are the answer.

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
        self._pending: Candidate | None = None  # the strategy's proposal being answered
        self._asked: Candidate | None = None  # what was handed out for it (its inlined form first)
        self._inlined: dict[Candidate, Candidate] = {}  # a candidate -> its inlined form, which failed
        self._inferred = False  # a passing inlined form answered for its candidate
        self._refuted = False  # inlined forms answered, none failed: searched again without them
        self._final_done = False
        self._any_failed = False  # whether a candidate of this search reproduced the failure
        self._empty: Candidate | None = None  # the bodies emptied, once asked (a strategy never asks it)
        self._empty_failed = False

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
        if self._asked is not None and _is_inline(self._asked):
            return "body-extract"
        return "body-extract" if self.strategy.done else f"body-{self.strategy.phase}"

    def _translate(self, kept: Candidate) -> Candidate:
        return Candidate(self.outer.nodes, None, self.flat.removed(kept.nodes))

    def _inline_of(self, candidate: Candidate, limit: int) -> Candidate | None:
        """``candidate`` with its body nodes out of the body: one control-flow node, at most
        ``limit`` body nodes left, none reading iteration state; None otherwise, or once the
        search started again without inlined forms."""
        if self._refuted or len(candidate.nodes) != 1 or not candidate.body:
            return None
        (top,) = candidate.nodes
        if bodies.kept_count(self.index, top, candidate.body) > limit:
            return None
        if not bodies.inlinable(self.index, top, candidate.body):
            return None
        return Candidate(candidate.nodes, None, candidate.body | {bodies.inline_id(top)})

    def propose(self) -> Candidate | None:
        """The strategy's next proposal, asked first in its inlined form when it keeps one body
        node (its verdict answers for it: no check of its own); at the end, the answer
        in its inlined form (at most ``INLINE_LIMIT`` body nodes) when not tried yet."""
        proposal = self.strategy.propose()
        if proposal is not None:
            if proposal != self._pending:
                self._pending = proposal
                translated = self._translate(proposal)
                self._asked = self._inline_of(translated, 1) or translated
            return self._asked
        self._pending = None
        if self._inferred and not self._inlined and not self._refuted:
            # No inlined form ever failed: the passes they stood for may be wrong (the failure
            # needs iteration state). Search again inside the answer, without inlined forms.
            self._refuted = True
            self.strategy = Strategy(SearchSpace(self.flat.index, self.strategy.best_bad.nodes), self.strategy.mode)
            return self.propose()
        passed_once = any(not failed for _, failed in self.strategy.facts)  # so would the empty bodies
        if self._empty is None and len(self.strategy.best_bad) == 1 and not passed_once:
            # 1-minimal needs the last body node tried away too (a node nothing reads, kept only
            # because a strategy never proposes an empty set): bodies left empty that still fail win
            self._empty = self._asked = self._translate(Candidate(frozenset()))
            return self._asked
        if self._final_done:
            return None
        self._final_done = True
        best = self.best_bad
        self._asked = None if _is_inline(best) else self._inline_of(best, INLINE_LIMIT)
        return self._asked

    def observe(self, candidate: Candidate, failed: bool, passed: bool) -> None:
        if candidate != self._asked:
            raise ValueError("observe() was given a candidate that is not the pending proposal")
        self._any_failed = self._any_failed or failed
        if self._pending is None and candidate == self._empty and not self._final_done:
            self._empty_failed = failed
            self._asked = None
            return
        if self._pending is None:  # the final inlined form
            if failed:
                self._inlined[self.best_bad] = candidate
            self._asked = None
            return
        translated = self._translate(self._pending)
        if _is_inline(candidate) and failed:
            self._inlined[translated] = candidate
            self.strategy.observe(self._pending, True, False)
        elif _is_inline(candidate):
            self._inferred = True  # taken as a pass of the candidate (not a clean one: no min-good)
            self.strategy.observe(self._pending, False, False)
        else:
            self.strategy.observe(self._pending, failed, passed)
        self._pending = self._asked = None

    @property
    def best_bad(self) -> Candidate:
        if self._empty_failed and self._empty is not None:
            return self._inlined.get(self._empty, self._empty)
        if not self._any_failed:
            return self.outer
        best = self._translate(self.strategy.best_bad)
        return self._inlined.get(best, best)

    @property
    def best_good(self) -> Candidate | None:
        good = self.strategy.best_good
        return self._translate(good) if good is not None else None


def _is_inline(candidate: Candidate) -> bool:
    return any(path.endswith(f"/{bodies.INLINE}") for path in candidate.body)

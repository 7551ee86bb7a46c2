"""``bisect`` and ``linear``: Polygraphy's meaning, on node sets.

Phase 1 (outputs side) walks the topological order and keeps the *cone* of one node (the node and
everything upstream), as when Polygraphy marks that node's outputs as the graph outputs. Phase 2
(inputs side) keeps the *descendants* of one node, as when Polygraphy marks its inputs as the graph
inputs (other boundary tensors may be frozen, see ``extract``). ``bisect`` binary-searches the
index, ``linear`` tries every index and keeps the smallest failure. A last phase removes side
branches that neither phase can (sources and sinks of the result), so one failing node is isolated
to exactly that node in branchy graphs too.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from reducer_core.candidate import Candidate
from reducer_core.strategies.base import Search, Tracker
from reducer_core.strategies.space import SearchSpace

Pick = Callable[[int], Candidate]
Phase = Generator[Candidate, bool, Candidate]


def _cone_picker(space: SearchSpace, current: frozenset[int]) -> tuple[list[int], Pick]:
    order = space.order(current)
    return order, lambda k: space.candidate(space.index.ancestors([order[k]], current))


def _descendant_picker(space: SearchSpace, current: frozenset[int]) -> tuple[list[int], Pick]:
    order = space.order(current)
    return order, lambda k: space.candidate(space.index.descendants([order[k]], current), primary=order[k])


def binary_phase(order: list[int], pick: Pick, start: Candidate, fails_low: bool) -> Phase:
    """Find the boundary index where candidates switch between failing and passing.

    ``fails_low=False`` (outputs side): the smallest k whose candidate fails; ``fails_low=True``
    (inputs side): the largest such k. The sentinels stand for the whole set (known to fail) and
    the empty set (passes), so the first and last nodes can be isolated too.
    """
    lo, hi = -1, len(order)
    best = start
    while hi - lo > 1:
        mid = (lo + hi) // 2
        candidate = pick(mid)
        failed = yield candidate
        if failed:
            best = candidate if len(candidate) <= len(best) else best
        if failed == fails_low:
            lo = mid
        else:
            hi = mid
    return best


def linear_phase(order: list[int], pick: Pick, start: Candidate, reverse: bool) -> Phase:
    """Try every index; keep the smallest failing candidate (ties: the one seen last)."""
    best = start
    indices = range(len(order) - 1, -1, -1) if reverse else range(len(order))
    for k in indices:
        candidate = pick(k)
        if (yield candidate) and len(candidate) <= len(best):
            best = candidate
    return best


def prune_branches(space: SearchSpace, current: Candidate) -> Phase:
    """Remove sources and sinks of the set one at a time while the failure persists."""
    progressed = True
    while progressed:
        progressed = False
        nodes = current.nodes
        edges = [n for n in space.order(nodes) if not (space.index.preds[n] & nodes)]
        edges += [n for n in reversed(space.order(nodes)) if not (space.index.succs[n] & nodes)]
        for node in dict.fromkeys(edges):
            candidate = space.candidate(nodes - {node}, current.primary)
            if candidate.nodes == nodes:
                continue
            if (yield candidate):
                current, progressed = candidate, True
                break
    return current


def _two_sided(space: SearchSpace, tracker: Tracker, name: str, linear: bool) -> Search:
    current = Candidate(space.start)
    if space.reduce_outputs:
        tracker.phase = f"{name}-outputs"
        order, pick = _cone_picker(space, current.nodes)
        phase = linear_phase(order, pick, current, True) if linear else binary_phase(order, pick, current, False)
        current = yield from phase
    if space.reduce_inputs:
        tracker.phase = f"{name}-inputs"
        order, pick = _descendant_picker(space, current.nodes)
        phase = linear_phase(order, pick, current, False) if linear else binary_phase(order, pick, current, True)
        current = yield from phase
    tracker.phase = "prune-branches"
    yield from prune_branches(space, current)


def bisect_search(space: SearchSpace, tracker: Tracker) -> Search:
    yield from _two_sided(space, tracker, "bisect", linear=False)


def linear_search(space: SearchSpace, tracker: Tracker) -> Search:
    yield from _two_sided(space, tracker, "linear", linear=True)

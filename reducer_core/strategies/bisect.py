"""``bisect`` and ``linear``: Polygraphy's meaning, on node sets.

Phase 1 (outputs side) removes nodes from the end: it keeps a *prefix* of the topological order,
as when Polygraphy marks the outputs of node k as graph outputs. Phase 2 (inputs side) removes
nodes from the start: it keeps a *suffix*, whose first node is the *primary* node whose inputs
become graph inputs (other boundary tensors may be frozen, see ``extract``), as when Polygraphy
marks node k's inputs as graph inputs. On a chain, prefix and suffix are exactly Polygraphy's
candidates; on branchy graphs, where Polygraphy's cone of node k is not monotone in k (its
bisection can go astray and keep 2-3 nodes), prefixes and suffixes stay monotone. ``bisect``
binary-searches k, ``linear`` tries every k and keeps the smallest failure.

A last phase removes side branches neither phase can: it tries each weakly connected component
of the result alone, then (for results of at most ``PRUNE_LIMIT`` nodes, so bisect stays
logarithmic) removes sources and sinks one at a time. One failing node is thus isolated to
exactly that node in branchy graphs too.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from reducer_core.candidate import Candidate
from reducer_core.strategies.space import SearchSpace
from reducer_core.strategies.tracker import Search, Tracker

Pick = Callable[[int], Candidate]
Phase = Generator[Candidate, bool, Candidate]


PRUNE_LIMIT = 16


def _prefix_picker(space: SearchSpace, current: frozenset[int]) -> tuple[list[int], Pick]:
    order = space.order(current)
    return order, lambda k: space.candidate(frozenset(order[: k + 1]))


def _suffix_picker(space: SearchSpace, current: frozenset[int]) -> tuple[list[int], Pick]:
    order = space.order(current)
    return order, lambda k: space.candidate(frozenset(order[k:]), primary=order[k])


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


def components(space: SearchSpace, nodes: frozenset[int]) -> list[frozenset[int]]:
    """Weakly connected components of ``nodes``, in topological order of their first node."""
    remaining, found = set(nodes), []
    for start in space.order(nodes):
        if start not in remaining:
            continue
        stack, part = [start], {start}
        while stack:
            n = stack.pop()
            for m in (space.index.preds[n] | space.index.succs[n]) & remaining:
                if m not in part:
                    part.add(m)
                    stack.append(m)
        remaining -= part
        found.append(frozenset(part))
    return found


def prune_branches(space: SearchSpace, current: Candidate) -> Phase:
    """Keep one connected component when it fails alone; then, on small results, remove sources
    and sinks one at a time while the failure persists (any node, in a space of node sets that
    are not subgraphs: no node holds others together there)."""
    parts = components(space, current.nodes)
    if len(parts) > 1:
        for part in parts:
            candidate = space.candidate(part, current.primary)
            if candidate.nodes and candidate.nodes != current.nodes and (yield candidate):
                current = candidate
                break
    progressed = len(current) <= PRUNE_LIMIT
    while progressed:
        progressed = False
        nodes = current.nodes
        edges = [n for n in space.order(nodes) if not (space.index.preds[n] & nodes) or not space.subgraphs]
        edges += [n for n in reversed(space.order(nodes)) if not (space.index.succs[n] & nodes)]
        for node in dict.fromkeys(edges):
            candidate = space.candidate(nodes - {node}, current.primary)
            if candidate.nodes == nodes:
                continue
            if (yield candidate):
                current, progressed = candidate, True
                break
    return current


def boundary_cone(space: SearchSpace, current: Candidate, upward: bool) -> Phase:
    """One check of Polygraphy's own candidate: the cone of the boundary node a phase found (the
    last node of a prefix with everything upstream, or the primary node of a suffix with everything
    downstream). It drops the unrelated branches a prefix or suffix carries along, also when the
    result is too large for ``prune_branches`` to remove them one by one."""
    order = space.order(current.nodes)
    if not order:
        return current
    if upward:
        cone = space.candidate(space.index.ancestors([order[-1]], current.nodes))
    else:
        cone = space.candidate(space.index.descendants([order[0]], current.nodes), primary=order[0])
    if cone.nodes and cone.nodes != current.nodes and (yield cone):
        return cone
    return current


def _two_sided(space: SearchSpace, tracker: Tracker, name: str, linear: bool) -> Search:
    current = Candidate(space.start)
    if space.reduce_outputs:
        tracker.phase = f"{name}-outputs"
        order, pick = _prefix_picker(space, current.nodes)
        phase = linear_phase(order, pick, current, True) if linear else binary_phase(order, pick, current, False)
        current = yield from phase
        current = yield from boundary_cone(space, current, upward=True)
    if space.reduce_inputs:
        tracker.phase = f"{name}-inputs"
        order, pick = _suffix_picker(space, current.nodes)
        phase = linear_phase(order, pick, current, False) if linear else binary_phase(order, pick, current, True)
        current = yield from phase
        current = yield from boundary_cone(space, current, upward=False)
    tracker.phase = "prune-branches"
    yield from prune_branches(space, current)


def bisect_search(space: SearchSpace, tracker: Tracker) -> Search:
    yield from _two_sided(space, tracker, "bisect", linear=False)


def linear_search(space: SearchSpace, tracker: Tracker) -> Search:
    yield from _two_sided(space, tracker, "linear", linear=True)

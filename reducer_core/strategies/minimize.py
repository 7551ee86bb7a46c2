"""``minimize`` and ``auto``: node-set minimisers that end 1-minimal.

``minimize`` is Zeller's ddmin over the topologically ordered node list (subsets, then
complements, doubling granularity), followed by a sweep that removes each node together with the
nodes that become dead without it, until no single removal reproduces the failure (1-minimal).

``auto`` is built for the fewest checks on the failures seen in practice:

1. *Optimistic descent*: check one half of the current set; when it passes, *assume* the failure
   lies in the other half without checking it. One check at the end verifies the assumption. One
   culprit (or one op type repeated) costs about log2(N) + 1 checks, on ever smaller candidates
   (cheap when a check builds an engine), against ~1.5 log2(N) for ddmin and ~2 log2(N) for
   bisect on both sides.
2. When the assumption breaks (nodes that fail only together), a binary search over the
   descent's levels finds the deepest set that still fails (about log2(log2(N)) checks).
3. *Ends*: bisect's binary searches on that set, a prefix then a suffix in topological order
   (about 2 log2(N) checks), give a window whose first and last nodes are both needed. The two
   alone are checked first: a pair of interacting nodes ends here.
4. *Interior*: a few interior nodes (about log2 of the window) are removed one at a time. When
   the failure needs many of them and none that held the window together could go (a long chain
   that must stay connected, a path through residual blocks: the answer is most of the window),
   the 1-minimal sweep is the cheapest finish, about one check per node where QuickXplain needs
   two. Otherwise QuickXplain isolates the k needed interior nodes with O(k log(N/k)) checks,
   the ends as background; if a non-monotone check made its answer pass, ddmin resumes from the
   window. Checks already made are served from the verdict cache.
5. The 1-minimal sweep ends every run: each node is removed with the nodes that become dead
   without it, and a sink also alone (it may hang off a needed node), until a whole pass removes
   nothing. On a 200-node chain whose answer is 121 nodes this is about 150 checks, against 379
   for descent + QuickXplain + sweep and 258 for Polygraphy's bisect-then-linear.

Every phase is a deterministic generator: the same verdicts give the same proposals (no clock,
no randomness), so a state replays and hypothetical verdicts can be explored ahead.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from typing import TypeVar

from reducer_core.candidate import Candidate
from reducer_core.strategies.bisect import Phase, binary_phase, components
from reducer_core.strategies.space import SearchSpace
from reducer_core.strategies.tracker import Search, Tracker

T = TypeVar("T")

NodePhase = Generator[Candidate, bool, frozenset[int]]


def even_chunks(items: Sequence[T], parts: int) -> list[list[T]]:
    """``items`` in ``parts`` consecutive chunks whose sizes differ by at most one (empty ones left out)."""
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        chunks.append(list(items[start:end]))
        start = end
    return [c for c in chunks if c]


def ddmin(space: SearchSpace, start: Candidate) -> Phase:
    current = start
    parts = 2
    while len(current) >= 2:
        items = space.order(current.nodes)
        chunks = even_chunks(items, parts)
        found = yield from _first_failing(space, current, [frozenset(c) for c in chunks])
        if found is not None:
            current, parts = found, 2
            continue
        if parts > 2:
            complements = [current.nodes - frozenset(c) for c in chunks]
            found = yield from _first_failing(space, current, complements)
            if found is not None:
                current, parts = found, max(parts - 1, 2)
                continue
        if parts >= len(items):
            break
        parts = min(len(items), parts * 2)
    return current


def _first_failing(space: SearchSpace, current: Candidate, sets: list[frozenset[int]]) -> Phase:
    for nodes in sets:
        candidate = space.candidate(nodes)
        if not candidate.nodes or candidate.nodes == current.nodes:
            continue
        if (yield candidate):
            return candidate
    return None  # type: ignore[return-value]


def one_minimal(space: SearchSpace, start: Candidate) -> Phase:
    """Sweep single-node removals (with what becomes dead) until a whole pass removes nothing.

    A sink whose removal takes its producers along (they become dead) and then does not
    reproduce is also tried alone: the producers may be needed while the sink is not (a node
    hanging off the failing one)."""
    current = start
    clean_pass = False
    while not clean_pass:
        clean_pass = True
        for node in reversed(space.order(current.nodes)):
            if node not in current.nodes:
                continue
            drops = [space.dead_after_removing(current.nodes, frozenset({node}))]
            if not space.index.succs[node] & current.nodes:
                drops.append(frozenset({node}))  # a sink: alone, it takes nothing else along
            for drop in dict.fromkeys(drops):
                candidate = space.candidate(current.nodes - drop)
                if not candidate.nodes or candidate.nodes == current.nodes:
                    continue  # nothing removed, or nothing left that could fail
                if (yield candidate):
                    current, clean_pass = candidate, False
                    break
    return current


def optimistic_descent(space: SearchSpace, start: Candidate) -> Phase:
    """Halve, checking one half only; on a broken assumption, back off to the deepest failing level."""
    levels: list[tuple[frozenset[int], bool]] = [(start.nodes, True)]
    assumed = space.order(start.nodes)
    while len(assumed) >= 2:
        half, other = assumed[: len(assumed) // 2], assumed[len(assumed) // 2 :]
        candidate = space.candidate(frozenset(half))
        if candidate.nodes and (yield candidate):
            levels.append((candidate.nodes, True))
            assumed = space.order(candidate.nodes)
        else:
            levels.append((space.candidate(frozenset(other)).nodes, False))
            assumed = other
    return (yield from _deepest_failing_level(space, levels))


def _deepest_failing_level(space: SearchSpace, levels: list[tuple[frozenset[int], bool]]) -> Phase:
    """Binary search between the deepest verified level (fails) and the deepest level (unknown)."""
    lo = max(i for i, (_, verified) in enumerate(levels) if verified)
    hi = len(levels)
    while hi - lo > 1:
        mid = (lo + hi) // 2 if hi < len(levels) else len(levels) - 1
        nodes = levels[mid][0]
        if nodes and (yield space.candidate(nodes)):
            lo = mid
        else:
            hi = mid
    return space.candidate(levels[lo][0])


def quickxplain(space: SearchSpace, background: frozenset[int], items: list[int], has_delta: bool) -> NodePhase:
    """Junker's QuickXplain: a minimal subset of ``items`` that fails together with ``background``."""
    if has_delta and background and (yield space.candidate(background)):
        return frozenset()
    if len(items) == 1:
        return frozenset(items)
    first, second = items[: len(items) // 2], items[len(items) // 2 :]
    needed_second = yield from quickxplain(space, background | frozenset(first), second, True)
    needed_first = yield from quickxplain(space, background | needed_second, first, bool(needed_second))
    return needed_first | needed_second


def narrow_ends(space: SearchSpace, start: Candidate) -> Phase:
    """Bisect's two binary searches on ``start``, on plain node sets (no frozen branches): the
    shortest failing prefix in topological order, cut to its last node's upstream cone; then the
    shortest failing suffix of that, cut to its first node's downstream cone. Under monotonicity
    the first and last nodes of the result are both needed. About 2 log2(N) checks."""
    current = start
    if space.reduce_outputs:
        order = space.order(current.nodes)
        current = yield from binary_phase(order, lambda k: space.candidate(frozenset(order[: k + 1])), current, False)
        current = yield from _cone(space, current, upward=True)
    if space.reduce_inputs:
        order = space.order(current.nodes)
        current = yield from binary_phase(order, lambda k: space.candidate(frozenset(order[k:])), current, True)
        current = yield from _cone(space, current, upward=False)
    return current


def _cone(space: SearchSpace, current: Candidate, upward: bool) -> Phase:
    order = space.order(current.nodes)
    if not order:
        return current
    index = space.index
    nodes = index.ancestors([order[-1]], current.nodes) if upward else index.descendants([order[0]], current.nodes)
    cone = space.candidate(nodes)
    if cone.nodes and cone.nodes != current.nodes and (yield cone):
        return cone
    return current


def isolate_interior(space: SearchSpace, window: Candidate) -> Phase:
    """What of a window's interior the failure needs, given that its two ends are needed.

    First the two ends alone (a pair of interacting nodes: one check). Otherwise a few interior
    nodes spread over the window (about log2 of its size) are removed one at a time, to learn
    what the failure needs. When it needs many of them and never lost a node that holds the
    window together (a long chain that must stay connected, a path through residual blocks whose
    side branches go), the 1-minimal sweep that follows is the cheapest finish: about one check
    per node, a whole side branch in one check. Otherwise (a few nodes needed, or needed nodes
    apart from each other, so that whole stretches between them go) QuickXplain isolates them in
    O(k log(N/k)) checks (``_sweep_is_cheaper``)."""
    order = space.order(window.nodes)
    if len(order) <= 2:
        return window
    ends = space.candidate(frozenset({order[0], order[-1]}))
    if ends.nodes and ends.nodes != window.nodes and (yield ends):
        return ends
    interior = order[1:-1]
    count = min(len(interior), max(3, len(order).bit_length()))
    probes = dict.fromkeys(interior[len(interior) * i // (count + 1)] for i in range(1, count + 1))
    current, needed, split = window, 0, False
    for node in probes:
        candidate = space.candidate(current.nodes - {node})
        if candidate.nodes and candidate.nodes != current.nodes and (yield candidate):
            split = len(components(space, candidate.nodes)) > len(components(space, current.nodes))
            current = candidate
            if split:
                break  # a node holding the window together could go: whole stretches may go
        else:
            needed += 1
    if not split and _sweep_is_cheaper(len(current), 2 + needed / len(probes) * (len(current) - 2)):
        return current
    return (yield from isolate_between(space, current, order[0], order[-1]))


def isolate_between(space: SearchSpace, window: Candidate, first: int, last: int) -> Phase:
    """QuickXplain over the window's interior, with its two ends (needed) as the background."""
    if not (space.reduce_inputs and space.reduce_outputs):
        return (yield from ddmin(space, window))
    ends = frozenset({first, last})
    needed = yield from quickxplain(space, ends, space.order(window.nodes - ends), True)
    candidate = space.candidate(ends | needed)
    if candidate.nodes == window.nodes:
        return window
    if candidate.nodes and (yield candidate):
        return candidate
    return (yield from ddmin(space, window))


def _sweep_is_cheaper(size: int, needed: float) -> bool:
    """Estimated checks: the 1-minimal sweep, one pass over ``size`` nodes and a clean pass over
    the ``needed`` ones; QuickXplain, about 2 k (1 + log2(N / k)) for k needed of N, then the
    same clean pass."""
    if needed >= size:
        return True
    quickxplain = 2 * needed * (1 + math.log2(size / needed)) + needed
    return size + needed <= quickxplain


def minimize_search(space: SearchSpace, tracker: Tracker) -> Search:
    tracker.phase = "ddmin"
    current = yield from ddmin(space, Candidate(space.start))
    tracker.phase = "1-minimal"
    yield from one_minimal(space, current)


def auto_search(space: SearchSpace, tracker: Tracker) -> Search:
    tracker.phase = "descent"
    current = yield from optimistic_descent(space, Candidate(space.start))
    if len(current) > 1:
        tracker.phase = "ends"
        current = yield from narrow_ends(space, current)
        tracker.phase = "interior"
        current = yield from isolate_interior(space, current)
    tracker.phase = "1-minimal"
    yield from one_minimal(space, current)

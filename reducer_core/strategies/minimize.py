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
   descent's levels finds the deepest set that still fails (about log2(log2(N)) checks), and
   QuickXplain isolates the k needed nodes in it with O(k log(N/k)) checks.
3. The result is verified; if a non-monotone check made QuickXplain's answer pass, ddmin resumes
   from the last verified set. Checks already made are served from the verdict cache.
4. The 1-minimal sweep of ``minimize`` ends every run.
"""

from __future__ import annotations

from collections.abc import Generator

from reducer_core.candidate import Candidate
from reducer_core.strategies.base import Search, Tracker
from reducer_core.strategies.bisect import Phase
from reducer_core.strategies.space import SearchSpace

NodePhase = Generator[Candidate, bool, frozenset[int]]


def _chunks(items: list[int], parts: int) -> list[list[int]]:
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        chunks.append(items[start:end])
        start = end
    return [c for c in chunks if c]


def ddmin(space: SearchSpace, start: Candidate) -> Phase:
    current = start
    parts = 2
    while len(current) >= 2:
        items = space.order(current.nodes)
        chunks = _chunks(items, parts)
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
    """Sweep single-node removals (with what becomes dead) until a whole pass removes nothing."""
    current = start
    clean_pass = False
    while not clean_pass:
        clean_pass = True
        for node in reversed(space.order(current.nodes)):
            if node not in current.nodes:
                continue
            removed = space.dead_after_removing(current.nodes, frozenset({node}))
            candidate = space.candidate(current.nodes - removed)
            if candidate.nodes == current.nodes:
                continue
            if not candidate.nodes:
                continue  # removing the last node leaves nothing that could fail
            if (yield candidate):
                current, clean_pass = candidate, False
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


def isolate_interacting(space: SearchSpace, start: Candidate) -> Phase:
    """QuickXplain on an unconstrained space, verified; ddmin where it cannot be trusted."""
    if len(start) < 2:
        return start
    if space.reduce_inputs and space.reduce_outputs:
        needed = yield from quickxplain(space, frozenset(), space.order(start.nodes), False)
        candidate = space.candidate(needed)
        if candidate.nodes == start.nodes:
            return start
        if candidate.nodes and (yield candidate):
            return candidate
    return (yield from ddmin(space, start))


def minimize_search(space: SearchSpace, tracker: Tracker) -> Search:
    tracker.phase = "ddmin"
    current = yield from ddmin(space, Candidate(space.start))
    tracker.phase = "1-minimal"
    yield from one_minimal(space, current)


def auto_search(space: SearchSpace, tracker: Tracker) -> Search:
    tracker.phase = "descent"
    current = yield from optimistic_descent(space, Candidate(space.start))
    tracker.phase = "quickxplain"
    current = yield from isolate_interacting(space, current)
    tracker.phase = "1-minimal"
    yield from one_minimal(space, current)

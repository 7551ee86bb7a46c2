"""``minimize`` and ``auto``: node-set minimisers that end 1-minimal.

``minimize`` is Zeller's ddmin over the topologically ordered node list (subsets, then
complements, doubling granularity), followed by a sweep that removes each node together with the
nodes that become dead without it, until no single removal reproduces the failure (1-minimal).

``auto`` first descends optimistically: it checks one half of the current set and, when that
half passes, *assumes* the failure lies in the other half without checking it. One check at the
end verifies the assumption; when it holds (one culprit, or one op type repeated), the result
costs about log2(N) + 1 checks, against ~1.5 log2(N) for ddmin and ~2 log2(N) for bisect on both
sides. When it does not hold (interacting nodes), ddmin resumes from the last verified set, with
the checks already made served from the verdict cache.
"""

from __future__ import annotations

from reducer_core.candidate import Candidate
from reducer_core.strategies.base import Search, Tracker
from reducer_core.strategies.bisect import Phase
from reducer_core.strategies.space import SearchSpace


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
    verified = start
    assumed = space.order(start.nodes)
    while len(assumed) >= 2:
        half, other = assumed[: len(assumed) // 2], assumed[len(assumed) // 2 :]
        candidate = space.candidate(frozenset(half))
        if candidate.nodes and (yield candidate):
            verified, assumed = candidate, space.order(candidate.nodes)
        else:
            assumed = other
    final = space.candidate(frozenset(assumed))
    if final.nodes and final.nodes != verified.nodes and (yield final):
        verified = final
    return verified


def minimize_search(space: SearchSpace, tracker: Tracker) -> Search:
    tracker.phase = "ddmin"
    current = yield from ddmin(space, Candidate(space.start))
    tracker.phase = "1-minimal"
    yield from one_minimal(space, current)


def auto_search(space: SearchSpace, tracker: Tracker) -> Search:
    tracker.phase = "descent"
    current = yield from optimistic_descent(space, Candidate(space.start))
    tracker.phase = "ddmin"
    current = yield from ddmin(space, current)
    tracker.phase = "1-minimal"
    yield from one_minimal(space, current)

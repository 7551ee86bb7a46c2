"""The data step's sizes checked ahead (``--jobs N`` with ``--reduce-data``): which sizes the
spare slots try while the data step waits for the verdict of its pending size.

A data search (``reducer_core.data_reduction``) is a deterministic step machine like a strategy:
after the verdict on its pending size (still fails or not) it proposes one of two next sizes, so its
future is a binary tree (size 1; halving while the model fails; bisection from the first pass;
then the next group of sizes; then, after the input sizes, the weights' sizes). ``speculate_sizes``
takes the tree's nodes breadth-first, each branch as likely as the other (a size search gives no
prior), so K slots check about log2(K + 1) levels of the search per round instead of one. Futures
are explored on copies (``DataSearch.copy``); the flow only consumes the verdicts of the sizes it
asks for, so the answer is the sequential one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection

from reducer_core.candidate import Candidate
from reducer_core.data_reduction import DataSearch

KnownSize = Callable[[Candidate], bool | None]
"""Whether a data candidate's known verdict still fails, or None when it is unknown."""
Next = Callable[[DataSearch], DataSearch | None]
"""The search that starts when one ends (the weights' sizes after the input sizes), or None."""

MAX_FUTURES = 64
"""At most this many futures are expanded per call (each proposal may extract the model)."""


def speculate_sizes(
    search: DataSearch, known: KnownSize, then: Next, busy: Collection[str], slots: int, gambles: int
) -> list[Candidate]:
    """Up to ``slots`` sizes worth checking now (none in ``busy``), breadth-first over the data
    search's future; every one but the pending size is a gamble (``gambles``: how many may go)."""
    chosen: dict[str, Candidate] = {}
    futures: deque[tuple[int, DataSearch]] = deque([(0, search.copy())])
    expanded = 0
    while futures and len(chosen) < slots and expanded < MAX_FUTURES:
        depth, position = futures.popleft()
        candidate = _proposal(position, then)
        if candidate is None:
            continue
        position, proposal = candidate
        outcome = known(proposal)
        if outcome is not None:  # no slot: follow the known verdict
            position.observe(proposal, outcome)
            futures.appendleft((depth, position))
            continue
        expanded += 1
        if proposal.fingerprint not in busy and proposal.fingerprint not in chosen:
            if depth > 0:  # a future size: a gamble
                if gambles <= 0:
                    break
                gambles -= 1
            chosen[proposal.fingerprint] = proposal
        failing = position.copy()
        failing.observe(proposal, True)
        position.observe(proposal, False)
        futures.extend([(depth + 1, failing), (depth + 1, position)])
    return list(chosen.values())


def _proposal(position: DataSearch, then: Next) -> tuple[DataSearch, Candidate] | None:
    """The next size of ``position``'s future, moving on to the next search when it ends."""
    current: DataSearch | None = position
    while current is not None:
        proposal = current.propose()
        if proposal is not None:
            return current, proposal
        current = then(current)
    return None

"""The search space of a reduction: the graph, the starting node set and the user's constraints."""

from __future__ import annotations

from dataclasses import dataclass

from reducer_core.candidate import Candidate
from reducer_core.graph import GraphIndex


@dataclass(frozen=True)
class SearchSpace:
    """``reduce_inputs=False`` keeps candidates closed upwards (their inputs stay the model's
    inputs); ``reduce_outputs=False`` keeps them closed downwards (outputs stay model outputs).
    ``subgraphs=False``: candidates are node sets that are not models of their own (the nodes
    kept in fp32 of a mixed-precision model), so removing a node never takes its producers along."""

    index: GraphIndex
    start: frozenset[int]
    reduce_inputs: bool = True
    reduce_outputs: bool = True
    subgraphs: bool = True

    def normalize(self, nodes: frozenset[int]) -> frozenset[int]:
        """Shrink ``nodes`` until it honours the constraints (removal only, never adds)."""
        if self.reduce_inputs and self.reduce_outputs:
            return nodes & self.start  # no constraint to honour (the common case, and a hot path)
        current = set(nodes & self.start)
        changed = True
        while changed:
            changed = False
            for n in sorted(current):
                if self._violates(n, current):
                    current.discard(n)
                    changed = True
        return frozenset(current)

    def _violates(self, node: int, current: set[int]) -> bool:
        """Whether keeping ``node`` would add a graph input or output the user asked to keep fixed."""
        if not self.reduce_inputs and any(p not in current for p in self.index.preds[node]):
            return True
        return not self.reduce_outputs and self._leaks_output(node, current)

    def _leaks_output(self, node: int, current: set[int]) -> bool:
        return any(s not in current for s in self.index.succs[node])

    def candidate(self, nodes: frozenset[int], primary: int | None = None) -> Candidate:
        normalized = self.normalize(nodes)
        return Candidate(normalized, primary if primary in normalized else None)

    def order(self, nodes: frozenset[int]) -> list[int]:
        """Nodes of the set in topological order (indices are already topological)."""
        return sorted(nodes)

    def dead_after_removing(self, nodes: frozenset[int], removed: frozenset[int]) -> frozenset[int]:
        """``removed`` plus the nodes that become dead: all their readers in the set were removed.
        A worklist over the producers of what was removed: linear in the edges it touches. Without
        ``subgraphs`` nothing becomes dead: ``removed`` itself."""
        if not self.subgraphs:
            return removed & nodes
        gone = set(removed)
        waiting = [p for r in removed for p in self.index.preds[r]]
        while waiting:
            n = waiting.pop()
            if n in gone or n not in nodes:
                continue
            readers_in_set = self.index.succs[n] & nodes
            if readers_in_set and readers_in_set <= gone and not self._feeds_graph_output(n):
                gone.add(n)
                waiting.extend(self.index.preds[n])
        return frozenset(gone)

    def _feeds_graph_output(self, node: int) -> bool:
        return node in self.index.output_nodes

"""The precision search's start (pure): a known-passing superset from one reference run.

A node whose fp32 output is beyond fp16's range overflows when it computes in fp16; a node
reading such a tensor in fp16 reads inf. So every writer and every reader of an out-of-range
tensor is kept in fp32: the superset ``range_superset`` names. ``PrecisionMachine`` checks that
set right after the plain fp16 model; when it passes, the strategy minimises inside it (a few
checks instead of a search over the whole model); when it does not (a failure that is no
overflow: rounding beyond tolerance), the search starts from every node, as before.

``precision_machine(superset)`` is the machine class for one superset (``from_state`` builds
its machines with the class it is called on)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from reducer_core.candidate import Candidate
from reducer_core.errors import GoalUnreachableError
from reducer_core.graph import GraphIndex
from reducer_core.records import ReductionResult
from reducer_core.session import ReductionMachine, _CheckStep, _Flow
from reducer_core.strategies import SearchSpace, Strategy
from reducer_core.verdict import Goal, Verdict, VerdictKind

FP16_MAX = 65504.0
RANGE_PHASE = "range"


def out_of_range(ranges: Mapping[str, float], limit: float = FP16_MAX) -> set[str]:
    """Tensors whose largest magnitude (``ranges``: one reference run) is beyond ``limit``."""
    return {name for name, peak in ranges.items() if peak > limit}


def range_superset(index: GraphIndex, ranges: Mapping[str, float], limit: float = FP16_MAX) -> frozenset[int]:
    """The writers and readers of every tensor beyond ``limit`` (node indices)."""
    beyond = out_of_range(ranges, limit)
    nodes: set[int] = set()
    for n, node in enumerate(index.nodes):
        if beyond.intersection(node.output) or beyond.intersection(node.input):
            nodes.add(n)
    return frozenset(nodes)


class PrecisionMachine(ReductionMachine):
    """A ``Goal.PASS`` machine that tries ``superset`` (a class attribute: ``precision_machine``)
    after the plain fp16 model, and minimises inside it when it passes."""

    superset: frozenset[int] = frozenset()

    def _run_to_pass(self) -> _Flow:
        assert self.config.goal is Goal.PASS
        nothing = Candidate(frozenset())
        original = yield _CheckStep(nothing, "original")
        assert isinstance(original, Verdict)
        self.original = original
        if original.kind is VerdictKind.PASS:
            self._found = nothing
            return
        everything = self.strategy.space.start
        if self.superset and self.superset != everything:
            verdict = yield _CheckStep(Candidate(self.superset), RANGE_PHASE)
            assert isinstance(verdict, Verdict)
            if verdict.kind is VerdictKind.PASS:
                space = SearchSpace(self.index, self.superset, subgraphs=False)
                self.strategy = Strategy(space, self.config.mode)
                yield from self._reduce(original)
                return
        verdict = yield _CheckStep(Candidate(everything), "all-kept")
        assert isinstance(verdict, Verdict)
        if verdict.kind is not VerdictKind.PASS:
            raise GoalUnreachableError(
                f"The check does not pass even with all {len(everything)} nodes kept (verdict: "
                f"{verdict.kind.value}{', ' + verdict.detail if verdict.detail else ''})."
            )
        yield from self._reduce(original)

    @property
    def result(self) -> ReductionResult:
        return dataclasses.replace(super().result, nodes_before=len(self.index.nodes))


def precision_machine(superset: frozenset[int]) -> type[PrecisionMachine]:
    """The machine class that starts from ``superset`` (empty: from every node)."""
    return type("PrecisionMachine", (PrecisionMachine,), {"superset": superset})

"""The precision search's start (pure): a known-passing superset from one reference run.

A node whose fp32 output is beyond fp16's range overflows when it computes in fp16; a node
reading such a tensor in fp16 reads inf. So every writer and every reader of an out-of-range
tensor is kept in fp32: the superset ``range_superset`` names. ``PrecisionMachine`` checks that
set right after the plain fp16 model; when it passes, it tries each of its nodes in fp16 once
(one check per node: a reader that turns inf into the right value, as Erf does, goes) and the
answer is 1-minimal; when it does not pass (a failure that is no overflow: rounding beyond
tolerance), the strategy searches from every node, as before.

``PrecisionFlow`` is that flow; ``precision_machine(superset)`` is the machine class that runs it
for one superset (``from_state`` builds its machines with the class it is called on)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.errors import GoalUnreachableError
from reducer_core.flow import CheckStep, ReductionFlow, Steps
from reducer_core.graph import GraphIndex
from reducer_core.machine import ReductionMachine
from reducer_core.records import ReductionResult
from reducer_core.requests import SessionListener
from reducer_core.strategies import Strategy
from reducer_core.verdict import Goal, Verdict, VerdictKind

FP16_MAX = 65504.0
RANGE_PHASE = "range"
MINIMISE_PHASE = "range-minimise"
SUPERSET_KEY = "precision_superset"


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


class PrecisionFlow(ReductionFlow):
    """A ``Goal.PASS`` flow that tries ``superset`` after the plain fp16 model, and minimises
    inside it when it passes."""

    def __init__(self, index: GraphIndex, config: SessionConfig, strategy: Strategy, superset: frozenset[int]) -> None:
        super().__init__(index, config, strategy)
        self.superset = superset

    def _run_to_pass(self) -> Steps:
        assert self.config.goal is Goal.PASS
        nothing = Candidate(frozenset())
        original = yield CheckStep(nothing, "original")
        assert isinstance(original, Verdict)
        self.original = original
        if original.kind is VerdictKind.PASS:
            self.found = nothing
            return
        everything = self.strategy.space.start
        if self.superset and self.superset != everything:
            verdict = yield CheckStep(Candidate(self.superset), RANGE_PHASE)
            assert isinstance(verdict, Verdict)
            if verdict.kind is VerdictKind.PASS:
                yield from self._minimise_superset()
                return
        verdict = yield CheckStep(Candidate(everything), "all-kept")
        assert isinstance(verdict, Verdict)
        if verdict.kind is not VerdictKind.PASS:
            raise GoalUnreachableError(
                f"The check does not pass even with all {len(everything)} nodes kept (verdict: "
                f"{verdict.kind.value}{', ' + verdict.detail if verdict.detail else ''})."
            )
        yield from self._reduce(original)

    def _minimise_superset(self) -> Steps:
        """Drop the superset's nodes one at a time, each kept out while the check still passes:
        one check per node of the superset, and the answer is 1-minimal (removing any node fails)."""
        kept = set(self.superset)
        self.found = Candidate(frozenset(kept))
        for node in sorted(self.superset):
            trial = Candidate(frozenset(kept - {node}))
            passes, _ = yield from self._observe(trial, MINIMISE_PHASE)
            if passes:
                kept.discard(node)
                self.found = trial


class PrecisionMachine(ReductionMachine):
    """A ``Goal.PASS`` machine that runs the ``PrecisionFlow`` of ``superset`` (a class attribute:
    ``precision_machine``)."""

    superset: frozenset[int] = frozenset()

    def _new_flow(self, strategy: Strategy) -> ReductionFlow:
        return PrecisionFlow(self.index, self.config, strategy, self.superset)

    def state(self, verdicts: bool = True) -> dict[str, Any]:
        """The session's state with the superset it started from: a resumed session (another
        process, another host whose fp32 run rounds differently) replays the same flow."""
        return {**super().state(verdicts), SUPERSET_KEY: sorted(self.superset)}

    @classmethod
    def from_state(
        cls,
        index: GraphIndex,
        config: SessionConfig,
        cache: VerdictCache,
        state: dict[str, Any],
        listener: SessionListener | None = None,
    ) -> ReductionMachine:
        saved = state.get(SUPERSET_KEY)
        machine_class = precision_machine(frozenset(int(n) for n in saved)) if saved is not None else cls
        return super(PrecisionMachine, machine_class).from_state(index, config, cache, state, listener)

    @property
    def result(self) -> ReductionResult:
        return dataclasses.replace(super().result, nodes_before=len(self.index.nodes))


def precision_machine(superset: frozenset[int]) -> type[PrecisionMachine]:
    """The machine class that starts from ``superset`` (empty: from every node)."""
    return type("PrecisionMachine", (PrecisionMachine,), {"superset": superset})

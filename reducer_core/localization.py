"""The pure decisions of the accuracy-debugging flowchart and of the min-good probe.

1. A layerwise run (every tensor of the full model marked as an output, compared in node order;
   the run itself is the shell's, ``engine.localize``) lists the tensors beyond tolerance.
2. ``find_suspect`` takes the first one whose kind matches the original failure (``nonfinite``
   for an overflow, ``tolerance`` otherwise) and proposes its producer node alone.
3. ``min_good_probes``: candidates next to a minimal failing one that may pass (its producers
   without it, then its consumers without it, then the nodes the layerwise run showed in
   tolerance: every node before the first mismatching tensor), so that a run settled by
   localisation, or a strategy that saw no clean pass, still has a closest passing model to offer.
   On real exports the neighbours often fail too: a producer that alone is off by more than the
   tolerance in fp16, consumers that read the overflowing tensor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reducer_core.candidate import Candidate
from reducer_core.strategies.space import SearchSpace
from reducer_core.verdict import Verdict, VerdictKind

MISMATCH_KINDS = ("nonfinite", "tolerance")


@dataclass(frozen=True)
class LayerwiseResult:
    """The layerwise run's verdict and its mismatching tensors, ``(kind, tensor)`` in node order."""

    verdict: Verdict
    mismatches: tuple[tuple[str, str], ...] = ()

    def compact(self) -> LayerwiseResult:
        """Only what ``find_suspect`` reads: the first mismatch of each kind (a big model may have
        thousands, and the result is kept in the session's state)."""
        kept: list[tuple[str, str]] = []
        for kind, tensor in self.mismatches:
            if all(kind != seen for seen, _ in kept):
                kept.append((kind, tensor))
        return LayerwiseResult(self.verdict, tuple(kept))

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict.to_json(), "mismatches": [list(m) for m in self.mismatches]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LayerwiseResult:
        mismatches = tuple((str(kind), str(tensor)) for kind, tensor in data.get("mismatches", []))
        return cls(Verdict.from_json(data["verdict"]), mismatches)


@dataclass(frozen=True)
class Suspect:
    """The node the layerwise run points at (``candidate``), or None and why not (``reason``)."""

    reason: str
    candidate: Candidate | None = None
    tensor: str | None = None


def find_suspect(space: SearchSpace, layerwise: LayerwiseResult, original: Verdict) -> Suspect:
    verdict = layerwise.verdict
    if verdict.kind not in (VerdictKind.FAIL, VerdictKind.PASS):
        return Suspect(f"layerwise run gave {verdict.kind.value}: {verdict.detail}")
    if not layerwise.mismatches:
        return Suspect("no tensor beyond tolerance with every tensor marked as an output")
    wanted = original.signature.removeprefix("mismatch:")
    kind, tensor = next((m for m in layerwise.mismatches if m[0] == wanted), layerwise.mismatches[0])
    producer = space.index.producer.get(tensor)
    if producer is None:
        return Suspect(f"first mismatching tensor '{tensor}' has no producer node")
    reason = f"first {kind} mismatch at '{tensor}', produced by {space.index.label(producer)}"
    return Suspect(reason, Candidate(frozenset({producer})), tensor)


def min_good_probes(
    space: SearchSpace, min_bad: Candidate, layerwise: LayerwiseResult | None = None
) -> list[Candidate]:
    """Passing-model candidates beside ``min_bad``, cheapest first: the nodes feeding it, then the
    nodes it feeds (whole upstream / downstream cones where the user keeps the model's inputs /
    outputs fixed), each without ``min_bad`` and within the search space's constraints; then, with
    a ``layerwise`` run, every node before the producer of its first mismatching tensor (node order
    is topological: the largest candidate whose every tensor the layerwise run found in tolerance)."""
    index, nodes = space.index, min_bad.nodes
    if space.reduce_inputs:
        upstream = frozenset[int]().union(*(index.preds[n] for n in nodes))
    else:
        upstream = index.ancestors(nodes, space.start)
    if space.reduce_outputs:
        downstream = frozenset[int]().union(*(index.succs[n] for n in nodes))
    else:
        downstream = index.descendants(nodes, space.start)
    sides = [upstream, downstream]
    first = first_mismatch_node(space, layerwise) if layerwise is not None else None
    if first is not None:
        sides.append(frozenset(n for n in space.start if n < first))
    probes: list[Candidate] = []
    for side in sides:
        candidate = space.candidate(side - nodes)
        if candidate.nodes and candidate not in probes:
            probes.append(candidate)
    return probes


def first_mismatch_node(space: SearchSpace, layerwise: LayerwiseResult) -> int | None:
    """The earliest node (in node order) producing a tensor the layerwise run found mismatching;
    None without one. Reads the compact result: the first mismatch of each kind is kept."""
    producers = [space.index.producer.get(tensor) for _, tensor in layerwise.mismatches]
    found = [p for p in producers if p is not None]
    return min(found) if found else None

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
   tolerance in fp16, consumers that read the overflowing tensor.
4. ``TensorErrors``: the layerwise run also measures every compared tensor's error (beyond
   tolerance or not), bounded to ``MAX_TENSOR_ERRORS`` entries (the worst kept), floats rounded;
   the web page overlays them on the graphs and ``--summary-json`` carries them. The session keeps
   only the compact result in its state: the errors go to its listener once."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from reducer_core.candidate import Candidate
from reducer_core.strategies.space import SearchSpace
from reducer_core.verdict import Verdict, VerdictKind

MISMATCH_KINDS = ("nonfinite", "tolerance")
MAX_TENSOR_ERRORS = 4000  # per-tensor errors kept of one layerwise run (the worst ones)
SIGNIFICANT_DIGITS = 4


def rounded(value: float | None) -> float | None:
    """``value`` to ``SIGNIFICANT_DIGITS`` significant digits; None for None, inf or NaN (JSON has
    no such numbers: a non-finite error is said by ``TensorError.nonfinite``)."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


@dataclass(frozen=True)
class TensorError:
    """How far the target's value of one tensor is from the reference's: the largest absolute and
    relative element errors (None when not comparable: ``nonfinite``, or shapes that differ),
    ``nonfinite`` when inf/NaN appear on one side only, ``beyond`` when it is beyond tolerance.
    ``node``: the producer's name (``Op:first_output`` when unnamed), ``op`` its type."""

    tensor: str
    node: str
    op: str
    max_abs: float | None
    max_rel: float | None
    nonfinite: bool = False
    beyond: bool = False

    @property
    def severity(self) -> tuple[bool, bool, float]:
        """Order of badness: non-finite, then not comparable, then the relative error."""
        unknown = self.max_rel is None and not self.nonfinite
        return (self.nonfinite, unknown, self.max_rel or 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "tensor": self.tensor,
            "node": self.node,
            "op": self.op,
            "max_abs": rounded(self.max_abs),
            "max_rel": rounded(self.max_rel),
            "nonfinite": self.nonfinite,
            "beyond": self.beyond,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TensorError:
        def number(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)

        return cls(
            str(data["tensor"]),
            str(data.get("node", "")),
            str(data.get("op", "")),
            number("max_abs"),
            number("max_rel"),
            bool(data.get("nonfinite", False)),
            bool(data.get("beyond", False)),
        )


@dataclass(frozen=True)
class TensorErrors:
    """Every compared tensor's error in one sample of the layerwise run (the first sample with a
    tensor beyond tolerance; the first sample when none has one), in node order. ``total``: how
    many tensors were compared; past ``MAX_TENSOR_ERRORS`` only the worst are kept."""

    sample: int
    total: int
    tensors: tuple[TensorError, ...]

    @property
    def truncated(self) -> bool:
        return len(self.tensors) < self.total

    @classmethod
    def bounded(cls, sample: int, errors: list[TensorError], limit: int = MAX_TENSOR_ERRORS) -> TensorErrors:
        """The ``limit`` worst of ``errors`` (in node order), rounded as stored."""
        kept = errors
        if len(errors) > limit:
            order = sorted(range(len(errors)), key=lambda i: errors[i].severity, reverse=True)
            kept = [errors[i] for i in sorted(order[:limit])]
        return cls(sample, len(errors), tuple(TensorError.from_json(e.to_json()) for e in kept))

    def to_json(self) -> dict[str, Any]:
        return {
            "sample": self.sample,
            "total": self.total,
            "truncated": self.truncated,
            "tensors": [e.to_json() for e in self.tensors],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TensorErrors:
        tensors = tuple(TensorError.from_json(e) for e in data.get("tensors", []))
        return cls(int(data.get("sample", 0)), int(data.get("total", len(tensors))), tensors)


@dataclass(frozen=True)
class LayerwiseResult:
    """The layerwise run's verdict and its mismatching tensors, ``(kind, tensor)`` in node order;
    ``errors``: every compared tensor's error (None when the run measured none)."""

    verdict: Verdict
    mismatches: tuple[tuple[str, str], ...] = ()
    errors: TensorErrors | None = None

    def compact(self) -> LayerwiseResult:
        """Only what ``find_suspect`` reads: the first mismatch of each kind (a big model may have
        thousands, and the result is kept in the session's state); no per-tensor errors."""
        kept: list[tuple[str, str]] = []
        for kind, tensor in self.mismatches:
            if all(kind != seen for seen, _ in kept):
                kept.append((kind, tensor))
        return LayerwiseResult(self.verdict, tuple(kept))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"verdict": self.verdict.to_json(), "mismatches": [list(m) for m in self.mismatches]}
        if self.errors is not None:
            data["errors"] = self.errors.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LayerwiseResult:
        mismatches = tuple((str(kind), str(tensor)) for kind, tensor in data.get("mismatches", []))
        errors = TensorErrors.from_json(data["errors"]) if data.get("errors") else None
        return cls(Verdict.from_json(data["verdict"]), mismatches, errors)


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

"""The accuracy-debugging flowchart, automated for ``compare``/``golden`` checks.

1. Run the full model once in both runtimes with every tensor marked as an output (one isolated
   child process) and list the tensors beyond tolerance, in node order.
2. Take the first one whose kind of mismatch matches the original failure (``nonfinite`` for an
   overflow, ``tolerance`` otherwise), extract its producer node alone, and check it with the
   real check (golden boundary inputs when given).
3. If that single node reproduces the original failure, it is the answer; otherwise (marking
   outputs changed the target, or the error needs more context) fall back to reduction.

The oracle is the caller's: checks are cached and counted like any other."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from checks.isolated import run_isolated
from checks.spec import CheckSpec
from engine.workspace import Workspace
from reducer_core.candidate import Candidate
from reducer_core.verdict import Verdict, VerdictKind

LAYERWISE_ENTRY = "checks.kinds:layerwise"


@dataclass(frozen=True)
class Localization:
    path: str  # "layerwise" (the flowchart found the node) or "reduction" (fell back)
    reason: str
    checks: int  # layerwise runs + candidate checks spent here
    candidate: Candidate | None = None
    tensor: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "reason": self.reason,
            "checks": self.checks,
            "tensor": self.tensor,
            "nodes": sorted(self.candidate.nodes) if self.candidate is not None else None,
        }


def layerwise_mismatches(
    workspace: Workspace, spec: CheckSpec, golden: Path | None
) -> tuple[Verdict, list[tuple[str, str]]]:
    """(verdict of the layerwise run, [(mismatch kind, tensor)] in node order)."""
    with tempfile.TemporaryDirectory(prefix="onnx-reducer-layerwise-", dir=workspace.options.work_dir) as tmp:
        path = Path(tmp) / "layerwise.onnx"
        workspace.write(Candidate(workspace.index.all_nodes()), path)
        payload = {
            "entry": LAYERWISE_ENTRY,
            "spec": spec.to_json(),
            "model": str(path),
            "golden": str(golden.resolve()) if golden is not None else None,
        }
        verdict, output = run_isolated(payload, spec.timeout, spec.memory_limit)
    found = []
    for line in output.splitlines():
        kind, sep, tensor = line.partition("\t")
        if sep and kind in ("nonfinite", "tolerance"):
            found.append((kind, tensor))
    return verdict, found


def localize(
    workspace: Workspace,
    spec: CheckSpec,
    golden: Path | None,
    original: Verdict,
    check: Callable[[Candidate], Verdict],
    pin_signature: bool = True,
) -> Localization:
    verdict, mismatches = layerwise_mismatches(workspace, spec, golden)
    if verdict.kind not in (VerdictKind.FAIL, VerdictKind.PASS):
        return Localization("reduction", f"layerwise run gave {verdict.kind.value}: {verdict.detail}", 1)
    if not mismatches:
        return Localization("reduction", "no tensor beyond tolerance with every tensor marked as an output", 1)
    wanted = original.signature.removeprefix("mismatch:")
    kind, tensor = next(((k, t) for k, t in mismatches if k == wanted), mismatches[0])
    producer = workspace.index.producer.get(tensor)
    if producer is None:
        return Localization("reduction", f"first mismatching tensor '{tensor}' has no producer node", 1)
    candidate = Candidate(frozenset({producer}))
    result = check(candidate)
    if result.reproduces(original, pin_signature):
        label = workspace.index.label(producer)
        return Localization(
            "layerwise", f"first {kind} mismatch at '{tensor}', produced by {label}", 2, candidate, tensor
        )
    return Localization(
        "reduction",
        f"the producer of '{tensor}' alone does not reproduce the failure ({result.kind.value} {result.signature})",
        2,
        None,
        tensor,
    )

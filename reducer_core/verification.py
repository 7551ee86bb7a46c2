"""Verified answers: what the tool hands over is what the check judged, and a check that fails
whatever the model is called out (issue 17). Shared by ``onnx-reducer reduce`` and the service.

**Verified outputs.** Every check's model is hashed (sha256 of the exact bytes written for it)
before the check runs (``JudgedBytes``). At the end, a handed-over model (min-bad, min-good) is
either those very bytes (an iteration model that references no weight file is self-contained, so
it is written out unchanged: ``judged``, no extra check), or it is a different file (weights
inlined, external data asked for, or no hash is known because the verdict came from a replay or
another job's cache) and is checked once more as written: ``rechecked`` when the check agrees
(min-bad fails like the original, under the session's pinning; min-good passes), ``disagrees``
otherwise. A run with an output that ``disagrees`` never reports success.

**A check that does not depend on the model.** When every verdict of a run reproduced the original
failure (no candidate passed or failed differently) and no layerwise run located it, one extra
check runs on a trivial model of Identity nodes that shares only the original's inputs
(``identity_model``). If that fails the same way too, the answer is flagged (``Suspect``): the
reduction still completes (Polygraphy's semantics), but the log, the summary and the exit code
say the answer is suspect, with the original's failure output. ``checker_crash`` names what the
output shows when it is the check's own crash (a script it cannot open, a module it cannot import,
a traceback that ends in the check script)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
from onnx import helper

from reducer_core.graph import GraphIndex
from reducer_core.records import IterationRecord, Localization
from reducer_core.verdict import Pinning, Verdict, VerdictKind

JUDGED = "judged"
RECHECKED = "rechecked"
DISAGREES = "disagrees"
MIN_BAD = "min_bad"
MIN_GOOD = "min_good"


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    """The sha256 (hex) of a file, read in 1 MiB chunks (a model's weights may not fit in memory twice)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def agrees(verdict: Verdict, which: str, original: Verdict, pinning: bool | Pinning) -> bool:
    """Whether ``verdict`` is what a handed-over ``which`` model must get: min-bad fails like the
    original (the session's pinning), min-good passes."""
    if which == MIN_GOOD:
        return verdict.kind is VerdictKind.PASS
    return verdict.reproduces(original, pinning)


@dataclass
class JudgedBytes:
    """sha256 of the exact bytes each check of this process judged, with the verdicts they got.
    ``written`` when a candidate's model is written (before its check), ``judged`` when the
    verdict of that request comes."""

    _pending: dict[str, tuple[str, str]] = field(default_factory=dict)  # request id -> (fingerprint, sha)
    _verdicts: dict[tuple[str, str], list[Verdict]] = field(default_factory=dict)

    def written(self, request_id: str, fingerprint: str, data: bytes) -> None:
        self._pending[request_id] = (fingerprint, sha256_of(data))

    def judged(self, request_id: str, verdict: Verdict) -> None:
        key = self._pending.pop(request_id, None)
        if key is not None and verdict.kind is not VerdictKind.INFRA_ERROR:
            self._verdicts.setdefault(key, []).append(verdict)

    def verdicts(self, fingerprint: str, sha256: str) -> list[Verdict]:
        """The verdicts checks gave these exact bytes of this candidate ([]: never judged here)."""
        return list(self._verdicts.get((fingerprint, sha256), ()))

    def to_json(self) -> dict[str, dict[str, list[dict[str, object]]]]:
        """``{fingerprint: {sha256: [verdict, ...]}}``: saved beside the verdicts of a debug replay,
        so a resumed run knows which bytes those verdicts were given to."""
        data: dict[str, dict[str, list[dict[str, object]]]] = {}
        for (fingerprint, digest), verdicts in sorted(self._verdicts.items()):
            data.setdefault(fingerprint, {})[digest] = [v.to_json() for v in verdicts]
        return data

    def merge_json(self, data: dict[str, Any]) -> None:
        for fingerprint, by_sha in data.items():
            for digest, verdicts in by_sha.items():
                known = self._verdicts.setdefault((str(fingerprint), str(digest)), [])
                known.extend(Verdict.from_json(v) for v in verdicts)


def judged_agrees(verdicts: list[Verdict], which: str, original: Verdict, pinning: bool | Pinning) -> bool:
    """Judged bytes count for min-bad when a check reproduced the failure on them (failures are
    trusted, also from a flaky check); for min-good when every check of them passed."""
    if not verdicts:
        return False
    if which == MIN_GOOD:
        return all(agrees(v, which, original, pinning) for v in verdicts)
    return any(agrees(v, which, original, pinning) for v in verdicts)


@dataclass(frozen=True)
class Verified:
    """How a handed-over model was verified: ``status`` judged / rechecked / disagrees,
    ``sha256`` of the file handed over (its model file), ``checks`` run to verify it, and the
    verdict of the last of them (None when judged)."""

    status: str
    sha256: str
    checks: int = 0
    verdict: Verdict | None = None

    @property
    def ok(self) -> bool:
        return self.status != DISAGREES

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"status": self.status, "sha256": self.sha256, "checks": self.checks}
        if self.verdict is not None:
            data["verdict"] = self.verdict.kind.value
            data["signature"] = self.verdict.signature
        return data


def verified_json(verified: dict[str, Verified | None]) -> dict[str, object]:
    """The summary's ``verified``: per output, its ``Verified`` (null when not written)."""
    return {name: (v.to_json() if v is not None else None) for name, v in verified.items()}


def disagreement(which: str, path: str, verified: Verified) -> str:
    """One sentence for a handed-over model whose final check disagreed."""
    got = verified.verdict
    said = f"{got.kind.value}{' ' + got.signature if got is not None and got.signature else ''}" if got else "?"
    if which == MIN_GOOD:
        return (
            f"The closest passing model written to {path} did not pass when checked once more as written "
            f"(verdict: {said}); it is not a verified min-good. The check may be flaky or depend on how the "
            "weights are stored; rerun with --confirm-flaky, or keep the iteration artifacts to compare."
        )
    return (
        f"The minimal failing model written to {path} did not fail like the original when checked once "
        f"more as written (verdict: {said}); the answer is not verified. The check may be flaky or depend on "
        "how the weights are stored; rerun with --confirm-flaky, or keep the iteration artifacts to compare."
    )


# -- a check that fails whatever the model ---------------------------------------------------------

_CRASH_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"can't open file '([^']*)'"), "Python cannot open the check script {0}"),
    (re.compile(r"ModuleNotFoundError: No module named '([^']*)'"), "the check cannot import module '{0}'"),
    (re.compile(r"ImportError: (.*)"), "the check cannot import what it needs ({0})"),
    (re.compile(r"(\S+): command not found"), "the check's command {0} is not found"),
    (re.compile(r"(\S+): not found"), "the check's command {0} is not found"),
    (re.compile(r"SyntaxError: (.*)"), "the check script has a syntax error ({0})"),
    (re.compile(r"(\S+): No such file or directory"), "the check names a file that does not exist ({0})"),
)
# Frames of these packages are the runtime judging the model, not the check script crashing.
_RUNTIME_FRAMES = re.compile(r"onnxruntime|tensorrt|polygraphy|/onnx/|site-packages|dist-packages")
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+', re.MULTILINE)
_EXCEPTION = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception)\b.*)$", re.MULTILINE)


def checker_crash(output: str) -> str | None:
    """What ``output`` shows when it is the check's own crash rather than a verdict about the
    model: a script Python cannot open, a module it cannot import, a command not found, a syntax
    error, or a Python traceback whose last frame is in the check script (not in a runtime)."""
    for pattern, text in _CRASH_PATTERNS:
        found = pattern.search(output)
        if found:
            return text.format(found.group(1).strip()[:200])
    if "Traceback (most recent call last)" in output:
        frames = _FRAME.findall(output)
        if frames and not _RUNTIME_FRAMES.search(frames[-1]):
            errors = _EXCEPTION.findall(output)
            raised = f" ({errors[-1].strip()[:200]})" if errors else ""
            return f"a Python exception raised in the check script {frames[-1]} itself{raised}"
    return None


def worth_preflight(records: Iterable[IterationRecord], localization: Localization | None) -> bool:
    """Whether the evidence says the check may not depend on the model: every verdict reproduced
    the original failure (none passed, none failed differently), and no layerwise run located the
    failure (which compares the model's own values). Otherwise the one extra check is not run."""
    if localization is not None and localization.path == "layerwise":
        return False
    return all(record.reproduces for record in records)


def identity_model(index: GraphIndex, ir_cap: int | None = None) -> onnx.ModelProto:
    """A trivial model unrelated to the original's nodes: one Identity per graph input (same
    names, types and shapes), or a single Constant when the graph has no inputs. When the
    original has Identity nodes itself (a check may look for them), the inputs are the outputs,
    with no node at all."""
    source = index.model
    inputs = [i for i in source.graph.input if i.name in set(index.graph_inputs)]
    nodes: list[onnx.NodeProto] = []
    outputs: list[onnx.ValueInfoProto] = []
    if inputs and any(node.op_type == "Identity" for node in source.graph.node):
        outputs = list(inputs)  # the inputs are the outputs: no node
    elif inputs:
        for number, value in enumerate(inputs):
            name = f"onnx_reducer_identity_{number}"
            nodes.append(helper.make_node("Identity", [value.name], [name], name=name))
            out = onnx.ValueInfoProto()
            out.CopyFrom(value)
            out.name = name
            outputs.append(out)
    else:
        constant = helper.make_tensor("value", onnx.TensorProto.FLOAT, [1], [0.0])
        nodes.append(helper.make_node("Constant", [], ["onnx_reducer_constant"], value=constant))
        outputs.append(helper.make_tensor_value_info("onnx_reducer_constant", onnx.TensorProto.FLOAT, [1]))
    graph = helper.make_graph(nodes, "onnx_reducer_trivial", inputs, outputs)
    opset = [o for o in source.opset_import if o.domain in ("", "ai.onnx")] or [helper.make_opsetid("", 13)]
    model = helper.make_model(graph, opset_imports=opset, producer_name="onnx-reducer")
    ir = source.ir_version or model.ir_version
    model.ir_version = min(ir, ir_cap) if ir_cap else ir
    return model


@dataclass(frozen=True)
class Suspect:
    """The check failed a trivial model the way it failed the original: the answer is suspect.
    ``verdict``: the trivial model's; ``crash``: what the output shows (``checker_crash``);
    ``output``: the original's failure output (a tail)."""

    verdict: Verdict
    original: Verdict
    crash: str | None
    output: str

    @property
    def message(self) -> str:
        how = f"{self.original.kind.value} {self.original.signature}".strip()
        cause = f" It looks like the check's own crash: {self.crash}." if self.crash else ""
        return (
            f"The check fails regardless of the model: it failed ({how}) on every candidate and also on a "
            "trivial model of Identity nodes that shares only the original's inputs, so the answer says "
            f"nothing about the model.{cause} Fix the check (run it by hand on the original model) and reduce again."
        )

    def to_json(self) -> dict[str, object]:
        return {
            "message": self.message,
            "evidence": "trivial-model-fails",
            "crash": self.crash,
            "verdict": self.verdict.kind.value,
            "signature": self.verdict.signature,
            "output": self.output,
        }

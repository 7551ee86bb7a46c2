"""The candidates of a pass bisection (``onnx-reducer bisect-passes``): what the target's runtime
actually did to this model, found from one build in an isolated child (``run_isolated``).

onnxruntime: the graph transformers that changed the model at the check's optimization level. The
session is created as the check creates it (provider, precision conversion, level) with verbose
logging, whose lines name every transformer applied and whether it modified the graph::

    [V:onnxruntime:, graph_transformer_mgr.cc:35 ApplyTransformers] Applying 31 graph transformer(s) for level 2 ...
    [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer MatmulTransposeFusion modified: 1 with status: OK

Each name is what ``InferenceSession(..., disabled_optimizers=[...])`` accepts (a rule-based
transformer, ``Level1_RuleBasedTransformer``, goes as a whole). Its level (1 basic, 2 extended,
3 and 4 all, 0 run at every level) says at which ``optimization`` it first applies.

TensorRT: the builder flags this build sets (FP16 on a weakly typed fp16 build, TF32 where set)
and the tactic sources the builder enables by default (``IBuilderConfig.get_tactic_sources``)."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from checks.isolated import run_isolated
from checks.spec import TRT_TACTIC_SOURCES, CheckSpec, RuntimeSpec
from reducer_core.pass_bisect import PassCandidate
from reducer_core.verdict import VerdictKind

CANDIDATES_ENTRY = "checks.pass_candidates:candidates_child"
CANDIDATES_TIMEOUT_S = 600.0
ORT_LEVEL_NAMES = {0: "disable", 1: "basic", 2: "extended", 3: "all", 4: "all"}

_LEVEL_LINE = re.compile(r"graph transformer\(s\) for level (\d+)")
_APPLIED_LINE = re.compile(r"GraphTransformer (\S+) modified: 1\b")


class CandidateError(RuntimeError):
    """The runtime could not build the model to list what it applies (not a verdict on the model)."""


def applied_transformers(log: str) -> list[PassCandidate]:
    """The transformers an onnxruntime verbose log says modified the graph, in first-applied order,
    each with the level whose loop applied it (0 before any level loop)."""
    level = 0
    found: dict[str, PassCandidate] = {}
    for line in log.splitlines():
        if (heading := _LEVEL_LINE.search(line)) is not None:
            level = int(heading.group(1))
        elif (applied := _APPLIED_LINE.search(line)) is not None and applied.group(1) not in found:
            found[applied.group(1)] = PassCandidate(applied.group(1), ORT_LEVEL_NAMES.get(level, "all"))
    return list(found.values())


def find_candidates(spec: CheckSpec, model_path: Path, python: str | None = None) -> list[PassCandidate]:
    """What the spec's target runtime applies to the model at ``model_path`` (one isolated build).
    Raises ``CandidateError`` when the build fails or the runtime is missing."""
    target = bisected_runtime(spec)
    with tempfile.TemporaryDirectory(prefix="onnx-reducer-passes-") as tmp:
        answer = Path(tmp) / "candidates.json"
        payload = {
            "entry": CANDIDATES_ENTRY,
            "target": target.to_json(),
            "model": str(Path(model_path).resolve()),
            "answer": str(answer),
        }
        verdict, _ = run_isolated(payload, min(spec.timeout, CANDIDATES_TIMEOUT_S), spec.memory_limit, None, python)
        if verdict.kind is not VerdictKind.PASS or not answer.exists():
            reason = f"{verdict.kind.value} {verdict.signature}: {verdict.detail}".strip()
            raise CandidateError(f"{target.runtime} could not build the model to list what it applies ({reason})")
        return [PassCandidate(str(c["name"]), str(c["level"])) for c in json.loads(answer.read_text())]


def bisected_runtime(spec: CheckSpec) -> RuntimeSpec:
    """The runtime whose passes are bisected: the spec's target. Raises ``ValueError`` for a spec
    without one (op-present without target, command)."""
    if spec.target is None:
        raise ValueError(
            f"kind '{spec.kind}' names no target runtime: pass bisection needs a check that runs the model on "
            "one (compare, golden, error, or op-present with a target)"
        )
    return spec.target


def candidates_child(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The child's side of ``find_candidates`` (``checks.child`` calls it)."""
    from checks.kinds import load_model  # noqa: PLC0415 - the child's imports: runtimes load here only
    from checks.spec import check_spec_from_dict  # noqa: PLC0415

    spec = check_spec_from_dict({"kind": "error", "target": payload["target"]}).target
    assert spec is not None
    model = load_model(Path(payload["model"]))
    with tempfile.TemporaryDirectory(prefix="runtime-", dir=".") as workdir:
        if spec.runtime == "tensorrt":
            found = _tensorrt_candidates(spec)
        else:
            found = _onnxruntime_candidates(spec, model, Path(workdir))
    Path(payload["answer"]).write_text(json.dumps([c.to_json() for c in found]))
    return {"kind": "pass", "signature": "", "detail": f"{len(found)} candidates", "output": ""}


def _onnxruntime_candidates(spec: RuntimeSpec, model: Any, workdir: Path) -> list[PassCandidate]:
    from checks.runtimes.onnxruntime import OrtRunner  # noqa: PLC0415 - onnxruntime loads in the child only

    log = workdir / "session.log"
    with _stderr_to(log):
        OrtRunner(spec, model, workdir, log_severity=0)
    return applied_transformers(log.read_text(errors="replace"))


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """File descriptor 2 (where onnxruntime's C++ logger writes) goes to ``path`` meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("wb") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _tensorrt_candidates(spec: RuntimeSpec) -> list[PassCandidate]:
    import tensorrt as trt  # noqa: PLC0415 - TensorRT exists on GPU workers only

    from checks.runtimes.tensorrt import build_plan, tensorrt_major  # noqa: PLC0415

    return tensorrt_candidates(spec, build_plan(spec.precision, tensorrt_major(str(trt.__version__))).fp16, trt)


def tensorrt_candidates(spec: RuntimeSpec, fp16_flag: bool, trt: Any) -> list[PassCandidate]:
    """The builder flags this build sets and the tactic sources enabled by default, less what the
    spec disables already (``trt``: the tensorrt module, or its stand-in in tests)."""
    from checks.runtimes.tensorrt import default_tactic_sources  # noqa: PLC0415

    found = [PassCandidate("FP16", "flag")] if fp16_flag else []
    found += [PassCandidate(name, "tactic") for name in default_tactic_sources(trt) if name in TRT_TACTIC_SOURCES]
    return [c for c in found if c.name not in spec.disabled_build_options]

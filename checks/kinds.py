"""What a spec check does inside its child process (``checks.child`` calls ``run_spec`` or
``layerwise`` with the payload). Each returns ``{kind, signature, detail, output}``.

Signatures (what signature pinning compares; stable while the graph shrinks):
- compare / golden: ``mismatch:nonfinite`` (the target gives inf/NaN where the reference is
  finite, or the reverse: an overflow) or ``mismatch:tolerance`` (finite values beyond atol/rtol).
  The outputs that exceeded tolerance, and the worst one, are in the detail; names are not in the
  signature because a subgraph's outputs are other tensors than the full model's.
  A runtime error while comparing is ``error:<ExceptionClass>``.
- error: ``error:<ExceptionClass>``, or ``error:match=<regex>`` when ``match`` is given.
- op-present: ``op-present:<matched op types and node names>``.

The default pinning compares families (``reducer_core.verdict.failure_family``): the two mismatch
signatures and each error signature are families of their own; every op-present signature is one
family (any listed op or name counts). ``--pin-signature strict`` compares whole signatures.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from checks import reference_cache
from checks.golden import GoldenStore
from checks.ort_runtime import random_inputs
from checks.runtimes import RuntimeUnavailableError, make_runner
from checks.runtimes.onnxruntime import OrtRunner
from checks.spec import CheckSpec, Tolerance, check_spec_from_dict
from reducer_core.localization import TensorError, TensorErrors
from reducer_core.modelio import load_model_with_weights
from reducer_core.prepare import mark_all_outputs
from reducer_core.samples import samples_note
from reducer_core.verdict import OP_NOT_REGISTERED_SIGNATURE

Result = dict[str, Any]
_REUSE: dict[str, str | None] = {}  # the payload's ``reference_cache`` folder (``checks.reference_cache``)


def _result(kind: str, signature: str = "", detail: str = "", output: str = "") -> Result:
    return {"kind": kind, "signature": signature, "detail": detail, "output": output}


# --- comparison ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    name: str
    nonfinite: bool
    max_abs: float
    max_rel: float
    bad: int
    total: int

    def describe(self) -> str:
        what = "non-finite values differ" if self.nonfinite else "beyond tolerance"
        return (
            f"{self.name}: {what}, max abs err {self.max_abs:.4g}, max rel err {self.max_rel:.4g}, "
            f"{self.bad}/{self.total} elements"
        )

    @property
    def severity(self) -> tuple[bool, float]:
        return (self.nonfinite, self.max_abs if np.isfinite(self.max_abs) else float("inf"))


def compare_tensor(name: str, reference: np.ndarray, target: np.ndarray, atol: float, rtol: float) -> Mismatch | None:
    """Polygraphy's elementwise rule: an element mismatches when ``|t - r| > atol`` and
    ``|t - r| > rtol * |r|``; finiteness must agree (inf/NaN where the other is finite fails)."""
    ref, tgt = np.asarray(reference), np.asarray(target)
    if ref.shape != tgt.shape:
        return Mismatch(name, False, float("inf"), float("inf"), tgt.size, max(ref.size, tgt.size))
    if not (np.issubdtype(ref.dtype, np.floating) or np.issubdtype(tgt.dtype, np.floating)):
        bad = int(np.count_nonzero(ref != tgt))
        return Mismatch(name, False, float(bad > 0), float(bad > 0), bad, ref.size) if bad else None
    r, t = ref.astype(np.float64), tgt.astype(np.float64)
    fin_r, fin_t = np.isfinite(r), np.isfinite(t)
    both = fin_r & fin_t
    nonfinite = (fin_r != fin_t) | (~fin_r & ~fin_t & ~((r == t) | (np.isnan(r) & np.isnan(t))))
    diff = np.where(both, np.abs(t - r), 0.0)
    rel = np.where(both, diff / np.maximum(np.abs(r), np.finfo(np.float64).tiny), 0.0)
    beyond = both & (diff > atol) & (rel > rtol)
    bad = int(np.count_nonzero(beyond | nonfinite))
    if not bad:
        return None
    any_nonfinite = bool(nonfinite.any())
    max_abs = float("inf") if any_nonfinite else float(diff.max(initial=0.0))
    max_rel = float("inf") if any_nonfinite else float(rel.max(initial=0.0))
    return Mismatch(name, any_nonfinite, max_abs, max_rel, bad, r.size)


def compare_outputs(
    reference: Mapping[str, np.ndarray], target: Mapping[str, np.ndarray], tolerance: Tolerance
) -> list[Mismatch]:
    found: list[Mismatch] = []
    for name, value in target.items():
        if name not in reference:
            continue
        atol, rtol = tolerance.for_output(name)
        mismatch = compare_tensor(name, reference[name], value, atol, rtol)
        if mismatch is not None:
            found.append(mismatch)
    return found


def mismatch_signature(mismatches: list[Mismatch]) -> str:
    return "mismatch:nonfinite" if any(m.nonfinite for m in mismatches) else "mismatch:tolerance"


def mismatch_detail(mismatches: list[Mismatch], sample: int) -> str:
    worst = max(mismatches, key=lambda m: m.severity)
    names = ", ".join(m.name for m in mismatches)
    return f"sample {sample}: outputs beyond tolerance: {names}; worst {worst.describe()}"


# --- inputs ----------------------------------------------------------------------------------------


def load_model(path: Path) -> onnx.ModelProto:
    """The candidate with its weights in memory. Iteration models reference the original weights
    through hardlinks, which ``onnx.load(..., load_external_data=True)`` refuses (onnx >= 1.19);
    ``load_model_with_weights`` validates every location itself and accepts them."""
    return load_model_with_weights(path)


def feeds_for(
    model: onnx.ModelProto, spec: CheckSpec, golden: Mapping[str, np.ndarray] | None
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Graph inputs from the golden values (by tensor name) where present, random otherwise."""
    low, high = spec.input_range
    random = random_inputs(model, spec.seed, low, high)
    feeds: dict[str, np.ndarray] = {}
    generated: list[str] = []
    for name, value in random.items():
        if golden is not None and name in golden:
            feeds[name] = _fitted(np.asarray(golden[name]), value.shape).astype(value.dtype, copy=False)
        else:
            feeds[name] = value
            generated.append(name)
    return feeds, generated


def _fitted(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A golden value cut to the input's shape where the input shrank (``Candidate.data``: the
    leading entries along each smaller dimension); unchanged otherwise."""
    if value.ndim != len(shape) or value.shape == shape or any(d > v for d, v in zip(shape, value.shape, strict=True)):
        return value
    return value[tuple(slice(0, d) for d in shape)]


def _golden_samples(payload: Mapping[str, Any]) -> list[Mapping[str, np.ndarray] | None]:
    if not payload.get("golden"):
        return [None]

    store = GoldenStore.open(payload["golden"])
    return [store.sample(i) for i in range(store.samples)]


# --- kinds -----------------------------------------------------------------------------------------


def run_spec(payload: Mapping[str, Any]) -> Result:
    spec = check_spec_from_dict(payload["spec"])
    _REUSE["folder"] = payload.get("reference_cache")  # this process runs this one check
    model_path = Path(payload["model"])
    if spec.kind == "op-present" and spec.target is None:
        return _op_present(spec, onnx.load(str(model_path), load_external_data=False))  # no weights needed

    try:
        model = load_model(model_path)
    except Exception as exc:  # noqa: BLE001 - an unreadable candidate is a problem of the tool
        return _result("infra-error", detail=f"cannot load {model_path}: {exc}")
    try:
        with tempfile.TemporaryDirectory(prefix="runtime-", dir=".") as workdir:
            if spec.kind == "op-present":
                return _op_present_optimized(spec, model, Path(workdir))
            if spec.kind == "error":
                return _error(spec, model, Path(workdir), _golden_samples(payload))
            return _accuracy(spec, model, Path(workdir), _golden_samples(payload))
    except RuntimeUnavailableError as exc:
        return _result("infra-error", detail=str(exc))


# How runtimes say that they have no implementation of an op (a custom domain's op, a plugin).
_NOT_REGISTERED = re.compile(
    r"(?P<op>[\w.]+:\w+)\(-?\d+\) is not a registered function/op"  # onnxruntime
    r"|No importer registered for op: (?P<trt>\w+)"  # TensorRT's ONNX parser
)


def not_registered(message: str) -> Result | None:
    """The ``crash`` / ``op-not-registered`` result when ``message`` says the runtime lacks an op
    (never the original failure unless an ``error`` check's ``match`` asks for that message)."""
    found = _NOT_REGISTERED.search(message)
    if found is None:
        return None
    op = found.group("op") or found.group("trt")
    detail = (
        f"the runtime has no implementation of op {op} (not registered): a limit of the runtime, not a failure "
        "of the model; an error check whose match covers this message counts it"
    )
    return _result("crash", OP_NOT_REGISTERED_SIGNATURE, detail, message)


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph``, and of the bodies of its Loop/If/Scan nodes (recursively)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for body in attr.graphs:
                    yield from _all_nodes(body)


def _op_present(spec: CheckSpec, model: onnx.ModelProto) -> Result:
    """An op or node name present anywhere: in the graph or inside a Loop/If body (so the
    reduction inside bodies works with this check)."""
    nodes = list(_all_nodes(model.graph))
    ops = sorted({n.op_type for n in nodes if n.op_type in spec.ops})
    names = sorted({n.name for n in nodes if n.name in spec.names})
    matched = ops + names
    if not matched:
        return _result("pass", detail="none of the listed ops/names is present")
    return _result("fail", "op-present:" + ",".join(matched), f"present: {', '.join(matched)}")


def _op_present_optimized(spec: CheckSpec, model: onnx.ModelProto, workdir: Path) -> Result:
    """op-present with a ``target``: the ops are looked for in the graph onnxruntime optimized for
    that target (its level, provider, precision and disabled optimizers), as it saves it
    (``optimized_model_filepath``): a fusion's op (FusedMatMul, Gelu, ...) shows there."""
    assert spec.target is not None
    saved = workdir / "optimized.onnx"
    try:
        OrtRunner(spec.target, model, workdir, optimized_model=saved)
    except RuntimeUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - a model onnxruntime cannot load has no optimized graph
        message = f"{type(exc).__name__}: {exc}"
        return not_registered(message) or _result("crash", f"error:{type(exc).__name__}", message[:500], message)
    result = _op_present(spec, onnx.load(str(saved), load_external_data=False))
    result["detail"] += f" (in the graph onnxruntime optimized: {spec.target.label})"
    return result


def _error(
    spec: CheckSpec, model: onnx.ModelProto, workdir: Path, samples: list[Mapping[str, np.ndarray] | None]
) -> Result:
    """Every sample runs on the target; ``fail_if`` over the samples decides (one sample: its result)."""
    assert spec.target is not None
    results: list[Result] = []
    try:
        runner = make_runner(spec.target, model, workdir)
    except RuntimeUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - the target's errors are what this check looks for
        return _error_result(spec, f"{type(exc).__name__}: {exc}")
    for golden in samples:
        try:
            runner.run(feeds_for(model, spec, golden)[0])
        except RuntimeUnavailableError:
            raise
        except Exception as exc:  # noqa: BLE001 - the target's errors are what this check looks for
            result = _error_result(spec, f"{type(exc).__name__}: {exc}")
            if result["kind"] == "crash":  # the runtime lacks an op: no sample can say more
                return result
            results.append(result)
            continue
        results.append(_result("pass", detail=f"{spec.target.label} ran without error"))
    return decide_samples(spec, results)


def _error_result(spec: CheckSpec, message: str) -> Result:
    if spec.match is not None and re.search(spec.match, message):
        return _result("fail", f"error:match={spec.match}", message[:500], message)
    if (missing := not_registered(message)) is not None:
        return missing
    if spec.match is None:
        return _result("fail", f"error:{type_name(message)}", message[:500], message)
    return _result("pass", detail=f"error not matching {spec.match!r}: {message[:300]}", output=message)


def type_name(message: str) -> str:
    """The exception class of a ``Class: message`` text."""
    return message.partition(":")[0]


def decide_samples(spec: CheckSpec, results: list[Result]) -> Result:
    """One result for all samples: the spec's ``fail_if`` (any, all, majority) of the samples must
    fail. The failure is the worst failing sample's (an overflow before a tolerance miss, else the
    first); the detail starts with which samples failed (``samples_note``)."""
    failing = [i for i, r in enumerate(results) if r["kind"] == "fail"]
    judged = len(results)
    needed = {"any": 1, "all": judged, "majority": judged // 2 + 1}[spec.fail_if]
    note = samples_note(judged, failing)
    if failing and len(failing) >= needed:
        worst = min(failing, key=lambda i: results[i]["signature"] != "mismatch:nonfinite")
        chosen = results[worst]
        detail = f"{note}; {chosen['detail']}"
        output = "\n".join(results[i]["detail"] for i in failing)
        return _result("fail", chosen["signature"], detail, chosen["output"] or output)
    passed = "all samples pass" if not failing else f"fail_if={spec.fail_if} needs {needed} failing"
    last = results[-1]["detail"] if results else ""
    return _result("pass", detail=f"{note} ({passed}); {last}")


def _reference_values(
    spec: CheckSpec,
    model: onnx.ModelProto,
    workdir: Path,
    feeds: Mapping[str, np.ndarray],
    golden: Mapping[str, np.ndarray] | None,
) -> Mapping[str, np.ndarray]:
    if spec.kind == "golden":
        assert golden is not None
        return {o.name: golden[o.name] for o in model.graph.output if o.name in golden}

    reference = spec.reference
    assert reference is not None
    return reference_cache.reference_values(  # the same candidate and inputs again: stored values
        _REUSE.get("folder"), reference, model, feeds, lambda: make_runner(reference, model, workdir).run(feeds)
    )


def _accuracy(
    spec: CheckSpec, model: onnx.ModelProto, workdir: Path, samples: list[Mapping[str, np.ndarray] | None]
) -> Result:
    """Every sample is judged; ``fail_if`` over the samples decides (``decide_samples``)."""
    assert spec.target is not None and spec.tolerance is not None
    results: list[Result] = []
    for i, golden in enumerate(samples):
        feeds, generated = feeds_for(model, spec, golden)
        try:
            reference = _reference_values(spec, model, workdir, feeds, golden)
            target = make_runner(spec.target, model, workdir).run(feeds)
        except RuntimeUnavailableError:
            raise
        except Exception as exc:  # noqa: BLE001 - a runtime error is a (different) failure
            message = f"{type(exc).__name__}: {exc}"
            if (missing := not_registered(message)) is not None:
                return missing
            results.append(_result("fail", f"error:{type(exc).__name__}", f"sample {i}: {message[:500]}", message))
            continue
        mismatches = compare_outputs(reference, target, spec.tolerance)
        if mismatches:
            note = f" (random values for {', '.join(generated)})" if generated else ""
            results.append(_result("fail", mismatch_signature(mismatches), mismatch_detail(mismatches, i) + note))
        else:
            results.append(_result("pass", detail="all outputs within tolerance"))
    return decide_samples(spec, results)


# --- layerwise (localisation) ----------------------------------------------------------------------


def layerwise(payload: Mapping[str, Any]) -> Result:
    """Run the full model with every tensor marked as an output in both runtimes (the reference
    values come from the golden file for kind 'golden'), compare tensor by tensor in node order,
    and report every tensor beyond tolerance (``output`` holds them, one per line, in order).
    With ``errors`` in the payload (a file path), every compared tensor's error in the sample
    reported (``TensorErrors``) is written there as JSON."""
    spec = check_spec_from_dict(payload["spec"])
    model = mark_all_outputs(load_model(Path(payload["model"])))
    samples = _golden_samples(payload)
    first: TensorErrors | None = None
    for i, golden in enumerate(samples):  # the first sample with a tensor beyond tolerance
        lines, errors = _layerwise_sample(spec, model, golden)
        measured = TensorErrors.bounded(i, errors)
        first = first or measured
        if lines:
            _write_errors(payload, measured)
            detail = f"{len(lines)} tensor(s) beyond tolerance" + (f" in sample {i}" if len(samples) > 1 else "")
            return _result("fail", "", detail, "\n".join(lines))
    _write_errors(payload, first)
    return _result("pass", "", f"0 tensor(s) beyond tolerance in {len(samples)} sample(s)", "")


def _write_errors(payload: Mapping[str, Any], errors: TensorErrors | None) -> None:
    if payload.get("errors") and errors is not None:
        Path(payload["errors"]).write_text(json.dumps(errors.to_json(), allow_nan=False))


def _layerwise_sample(
    spec: CheckSpec, model: onnx.ModelProto, golden: Mapping[str, np.ndarray] | None
) -> tuple[list[str], list[TensorError]]:
    assert spec.target is not None and spec.tolerance is not None
    feeds, _ = feeds_for(model, spec, golden)
    with tempfile.TemporaryDirectory(prefix="layerwise-", dir=".") as workdir:
        if spec.kind == "golden":
            assert golden is not None
            reference: Mapping[str, np.ndarray] = golden
        else:
            assert spec.reference is not None
            reference = make_runner(spec.reference, model, Path(workdir)).run(feeds)
        target = make_runner(spec.target, model, Path(workdir)).run(feeds)
    lines: list[str] = []
    errors: list[TensorError] = []
    for node in model.graph.node:
        for name in node.output:
            if name in target and name in reference:
                atol, rtol = spec.tolerance.for_output(name)
                mismatch = compare_tensor(name, reference[name], target[name], atol, rtol)
                if mismatch is not None:
                    lines.append(f"{'nonfinite' if mismatch.nonfinite else 'tolerance'}\t{name}")
                label = node.name or f"{node.op_type}:{node.output[0]}"
                errors.append(tensor_error(name, label, node.op_type, reference[name], target[name], mismatch))
    return lines, errors


def tensor_error(
    name: str, node: str, op: str, reference: np.ndarray, target: np.ndarray, mismatch: Mismatch | None
) -> TensorError:
    """One tensor's error, within tolerance or not (``mismatch``: ``compare_tensor``'s answer):
    the largest absolute and relative element errors where both sides are finite; None for both
    when the values are not comparable (inf/NaN on one side only, or shapes that differ)."""
    ref, tgt = np.asarray(reference), np.asarray(target)
    beyond = mismatch is not None
    if mismatch is not None and (mismatch.nonfinite or ref.shape != tgt.shape):
        return TensorError(name, node, op, None, None, mismatch.nonfinite, beyond)
    if ref.shape != tgt.shape or ref.size == 0:
        return TensorError(name, node, op, 0.0, 0.0, False, beyond)
    r, t = ref.astype(np.float64), tgt.astype(np.float64)
    both = np.isfinite(r) & np.isfinite(t)
    diff = np.where(both, np.abs(t - r), 0.0)
    rel = np.where(both, diff / np.maximum(np.abs(r), np.finfo(np.float64).tiny), 0.0)
    return TensorError(name, node, op, float(diff.max(initial=0.0)), float(rel.max(initial=0.0)), False, beyond)

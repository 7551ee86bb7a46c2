"""Reproduce the failure of an onnx-reducer bug-report bundle.

    python repro.py [MODEL] [--save-outputs FOLDER]

MODEL defaults to the bundle's ``min_bad.onnx``. The check the reduction ran is in ``check.json``
beside this script, with ``pinned``: the failure the reduction pinned on min-bad (its verdict's
signature: the mismatch kind and the outputs of a compare/golden check, the error of an error
check, the exit code or matched regex of a command). This script judges MODEL the same way and
names what it saw, one exit code each:

    1  REPRODUCED: the pinned failure, and only that one
    0  the model passes the check
    2  cannot run the check here (a command that is not installed, a missing runtime, provider or GPU)
    3  another failure (a runtime error where a mismatch was pinned, a shape error, another regex or
       exit code): something fails, but not the failure the bundle is about

The inputs fed are those min-bad was judged with (``inputs.npz``, one file per sample: the data
step may have shrunk min-bad's inputs); another MODEL gets its inputs as the check built them
(golden values by tensor name, cut to the model's input sizes, generated values otherwise). It
needs only ``onnx``, ``onnxruntime`` and ``numpy`` (plus TensorRT through Polygraphy for a TensorRT
target) and nothing of onnx-reducer. ``--save-outputs`` writes the reference (``expected.npz``) and
target (``observed.npz``) outputs of the first sample to FOLDER.

(The bundle's ``repro.py`` is this file: onnx-reducer copies it in unchanged.)
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    import numpy as np
    import onnx
except ImportError as _missing:  # exit 2, not a traceback's exit 1 (which would read as "reproduces")
    print(f"CANNOT RUN: cannot run the check here: {_missing} (pip install onnx onnxruntime numpy)")
    sys.exit(2)

HERE = Path(__file__).resolve().parent
REPRODUCED, NOT_REPRODUCED, CANNOT_RUN, OTHER_FAILURE = 1, 0, 2, 3
_NOT_REGISTERED = re.compile(
    r"(?P<op>[\w.]+:\w+)\(-?\d+\) is not a registered function/op|No importer registered for op: (?P<trt>\w+)"
)
_NP_FROM_ONNX: dict[int, Any] = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.BOOL: np.bool_,
}
_ORT_TYPES: dict[str, Any] = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


class CannotRunError(Exception):
    """The check cannot run here (a runtime or a converted model is missing)."""


# --- inputs ----------------------------------------------------------------------------------------


def _npz_samples(stem: str) -> list[dict[str, np.ndarray]]:
    """``stem.npz`` (sample 0), ``stem_1.npz``, ``stem_2.npz``, ... as name -> array maps."""
    samples: list[dict[str, np.ndarray]] = []
    while True:
        path = HERE / (f"{stem}.npz" if not samples else f"{stem}_{len(samples)}.npz")
        if not path.exists():
            return samples
        with np.load(path, allow_pickle=False) as archive:
            samples.append({name: archive[name] for name in archive.files})


def graph_inputs(model: onnx.ModelProto) -> dict[str, tuple[int, list[int]]]:
    initializers = {t.name for t in model.graph.initializer}
    found: dict[str, tuple[int, list[int]]] = {}
    for value in model.graph.input:
        if value.name not in initializers:
            tensor_type = value.type.tensor_type
            shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
            found[value.name] = (tensor_type.elem_type, shape)
    return found


def generated_inputs(model: onnx.ModelProto, seed: int, low: float, high: float) -> dict[str, np.ndarray]:
    """The values the check generated: uniform in [low, high), one draw per input in graph order
    from ``numpy.random.default_rng(seed)``, symbolic dimensions as 1 (as Polygraphy does)."""
    rng = np.random.default_rng(seed)
    values: dict[str, np.ndarray] = {}
    for name, (elem_type, shape) in graph_inputs(model).items():
        dtype = _NP_FROM_ONNX.get(elem_type, np.float32)
        if np.issubdtype(dtype, np.floating):
            values[name] = rng.uniform(low, high, size=shape).astype(dtype)
        elif dtype == np.bool_:
            values[name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        else:
            values[name] = rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return values


def _fitted(value: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """A golden value cut to the input's shape where the input shrank (the data step keeps the
    leading entries along each smaller dimension), as the check cut it; unchanged otherwise."""
    if value.ndim != len(shape) or tuple(value.shape) == tuple(shape):
        return value
    if any(d > v for d, v in zip(shape, value.shape, strict=True)):
        return value
    return value[tuple(slice(0, d) for d in shape)]


def feeds_for(
    model: onnx.ModelProto,
    spec: Mapping[str, Any],
    golden: Mapping[str, np.ndarray] | None,
    judged: Mapping[str, np.ndarray] | None = None,
) -> tuple[dict[str, np.ndarray], str]:
    """MODEL's inputs and where they come from. ``judged``: the inputs min-bad was judged with
    (``inputs.npz``): fed as they are when MODEL's inputs are exactly those tensors, of those
    shapes (min_bad.onnx). Otherwise as the check built them: golden values by tensor name, cut
    to the model's input sizes, generated values for the rest."""
    low, high = spec.get("input_range", [0.0, 1.0])
    feeds = generated_inputs(model, int(spec.get("seed", 1)), float(low), float(high))
    same = judged is not None and set(judged) == set(feeds)
    if same and judged is not None and all(tuple(np.shape(judged[n])) == feeds[n].shape for n in feeds):
        return {n: np.asarray(judged[n]).astype(feeds[n].dtype, copy=False) for n in feeds}, "inputs.npz"
    used = []
    for name, value in feeds.items():
        if golden is not None and name in golden:
            feeds[name] = _fitted(np.asarray(golden[name]), value.shape).astype(value.dtype, copy=False)
            used.append(name)
    source = f"golden values of {', '.join(used)}" if used else "generated values"
    if used and len(used) < len(feeds):
        source += ", generated values for the rest"
    return feeds, source


# --- runtimes --------------------------------------------------------------------------------------


def converted_model(model_path: Path, role: str, runtime: Mapping[str, Any]) -> Path:
    """The model a runtime runs: fp16 targets of onnxruntime run the converted model the bundle
    ships beside each model (``min_bad.target.onnx``), made as onnx-reducer's check made it."""
    if runtime.get("runtime", "onnxruntime") != "onnxruntime" or runtime.get("precision", "fp32") == "fp32":
        return model_path
    shipped = model_path.with_name(f"{model_path.stem}.{role}.onnx")
    if shipped.exists():
        return shipped
    raise CannotRunError(
        f"the {role} runs the model in {runtime.get('precision')}; this bundle ships the converted model only for "
        f"its own models ({model_path.stem}.{role}.onnx is missing). Convert {model_path.name} the same way "
        "(onnxconverter-common, inputs and outputs kept fp32) or run the bundle's min_bad.onnx / min_good.onnx."
    )


def run_model(
    model_path: Path, role: str, runtime: Mapping[str, Any], feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    path = converted_model(model_path, role, runtime)
    if runtime.get("runtime", "onnxruntime") == "tensorrt":
        return _run_tensorrt(path, runtime, feeds)
    session = ort_session(path, runtime)
    types = {i.name: i.type for i in session.get_inputs()}
    feed = {}
    for name, ort_type in types.items():
        dtype = _ORT_TYPES.get(ort_type)
        feed[name] = np.asarray(feeds[name]) if dtype is None else np.asarray(feeds[name]).astype(dtype, copy=False)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feed), strict=True))


def ort_session(path: Path, runtime: Mapping[str, Any], optimized: Path | None = None) -> Any:
    """An onnxruntime session as the check made it: provider, level, disabled optimizers;
    ``optimized``: where onnxruntime saves the graph it optimized."""
    import onnxruntime as ort  # noqa: PLC0415 - repro.py runs standalone; onnxruntime is needed only for onnxruntime targets

    provider = runtime.get("provider") or "CPUExecutionProvider"
    if provider not in ort.get_available_providers():
        raise CannotRunError(f"onnxruntime here has no {provider} (available: {ort.get_available_providers()})")
    options = ort.SessionOptions()
    options.graph_optimization_level = {
        "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[runtime.get("optimization", "all")]
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    disabled = list(runtime.get("disabled_optimizers") or []) or None
    return ort.InferenceSession(str(path), options, providers=[provider], disabled_optimizers=disabled)


def _run_tensorrt(path: Path, runtime: Mapping[str, Any], feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    try:
        from polygraphy.backend import trt as poly_trt  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415 - optional: TensorRT targets only
    except ImportError as exc:
        raise CannotRunError(f"the target is TensorRT: install TensorRT and Polygraphy ({exc})") from exc
    precision = runtime.get("precision", "fp32")
    calibrator = poly_trt.Calibrator([dict(feeds)]) if precision == "int8" else None
    config = poly_trt.CreateConfig(
        fp16=precision == "fp16", bf16=precision == "bf16", int8=precision == "int8", calibrator=calibrator
    )
    engine = poly_trt.EngineFromNetwork(poly_trt.NetworkFromOnnxPath(str(path)), config=config)
    with poly_trt.TrtRunner(engine) as runner:
        return {name: np.asarray(value) for name, value in runner.infer(dict(feeds)).items()}


# --- comparing -------------------------------------------------------------------------------------


def compare_tensor(name: str, reference: np.ndarray, target: np.ndarray, atol: float, rtol: float) -> str | None:
    """Polygraphy's elementwise rule: an element mismatches when ``|t - r| > atol`` and
    ``|t - r| > rtol * |r|``; finiteness must agree. Returns a description of a mismatch (one that
    starts with ``NONFINITE_PREFIX`` for inf/NaN on one side only: an overflow)."""
    ref, tgt = np.asarray(reference), np.asarray(target)
    if ref.shape != tgt.shape:
        return f"{name}: shape {tgt.shape} differs from the reference's {ref.shape}"
    if not (np.issubdtype(ref.dtype, np.floating) or np.issubdtype(tgt.dtype, np.floating)):
        bad = int(np.count_nonzero(ref != tgt))
        return f"{name}: {bad}/{ref.size} elements differ" if bad else None
    r, t = ref.astype(np.float64), tgt.astype(np.float64)
    fin_r, fin_t = np.isfinite(r), np.isfinite(t)
    both = fin_r & fin_t
    nonfinite = (fin_r != fin_t) | (~fin_r & ~fin_t & ~((r == t) | (np.isnan(r) & np.isnan(t))))
    diff = np.where(both, np.abs(t - r), 0.0)
    rel = np.where(both, diff / np.maximum(np.abs(r), np.finfo(np.float64).tiny), 0.0)
    bad = int(np.count_nonzero((both & (diff > atol) & (rel > rtol)) | nonfinite))
    if not bad:
        return None
    if nonfinite.any():
        return f"{name}: {NONFINITE_PREFIX}, {bad}/{r.size} elements"
    return (
        f"{name}: beyond tolerance, max abs err {float(diff.max(initial=0.0)):.4g}, max rel err "
        f"{float(rel.max(initial=0.0)):.4g}, {bad}/{r.size} elements (atol {atol:g}, rtol {rtol:g})"
    )


NONFINITE_PREFIX = "non-finite values differ (inf/NaN on one side only)"


def _tolerance(spec: Mapping[str, Any], name: str) -> tuple[float, float]:
    tolerance = spec.get("tolerance", {})
    entry = tolerance.get("per_output", {}).get(name, {})
    return float(entry.get("atol", tolerance.get("atol", 1e-5))), float(entry.get("rtol", tolerance.get("rtol", 1e-5)))


def _save(folder: str | None, name: str, values: Mapping[str, np.ndarray]) -> None:
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        arrays: dict[str, Any] = {k: np.asarray(v) for k, v in values.items()}
        np.savez(Path(folder) / name, **arrays)


# --- the pinned failure ----------------------------------------------------------------------------


class Observed:
    """What one run of the check saw: ``signature`` as the reduction writes it (``mismatch:nonfinite``,
    ``mismatch:tolerance``, ``error:<Class>``, ``error:match=<regex>``, ``op-present:...``,
    ``exit=N``, ``regex=R``, ``exit=N;regex=R``, ``signal=NAME``, ``timeout``), ``outputs``: the
    outputs that mismatched; ``text``: the line that says it."""

    def __init__(self, signature: str, text: str, outputs: Sequence[str] = (), kind: str = "fail") -> None:
        self.signature, self.text, self.outputs, self.kind = signature, text, list(outputs), kind


def pinned_of(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The failure the reduction pinned on min-bad (``check.json``'s ``pinned``): ``kind`` (fail,
    crash, timeout), ``signature``, ``pinning`` (off: any failure counts; kind and strict: this
    signature), ``outputs`` (compare/golden: the outputs min-bad mismatched on)."""
    pinned = dict(spec.get("pinned") or {})
    pinned.setdefault("pinning", "off" if not pinned.get("signature") and not pinned.get("kind") else "kind")
    return pinned


def _pinned_text(pinned: Mapping[str, Any]) -> str:
    what = pinned.get("signature") or pinned.get("kind") or "any failure"
    if pinned.get("outputs"):
        what += f" on {', '.join(pinned['outputs'])}"
    return what


def is_pinned(observed: Observed, pinned: Mapping[str, Any], outputs: Sequence[str] = ()) -> bool:
    """Whether ``observed`` is the failure the reduction pinned. ``outputs``: MODEL's outputs (a
    pinned output this model does not have cannot be asked for)."""
    if pinned.get("pinning") == "off":
        return observed.kind != "timeout" or pinned.get("kind") == "timeout"
    if observed.kind != pinned.get("kind", "fail"):
        return False
    wanted = str(pinned.get("signature", ""))
    if observed.signature != wanted:
        if pinned.get("pinning") == "strict":
            return False
        if not (wanted.startswith("op-present:") and observed.signature.startswith("op-present:")):
            return False
    pinned_outputs = [o for o in pinned.get("outputs") or [] if o in outputs]
    return not pinned_outputs or bool(set(pinned_outputs) & set(observed.outputs))


def decide(spec: Mapping[str, Any], results: Sequence[Observed | None], outputs: Sequence[str] = ()) -> int:
    """One exit code for every sample judged (``fail_if``: any, all or majority of the samples must
    show the pinned failure): 1 when enough samples show it, else 3 when any sample failed some
    other way, else 0."""
    pinned = pinned_of(spec)
    hits = [i for i, r in enumerate(results) if r is not None and is_pinned(r, pinned, outputs)]
    others = [i for i, r in enumerate(results) if r is not None and i not in hits]
    judged = len(results)
    needed = {"any": 1, "all": judged, "majority": judged // 2 + 1}.get(str(spec.get("fail_if", "any")), 1)
    if hits and len(hits) >= needed:
        if len(results) > 1:
            print(
                f"samples showing the pinned failure: {hits} of {judged} judged (fail_if {spec.get('fail_if', 'any')})"
            )
        return REPRODUCED
    if others:
        first = results[others[0]]
        assert first is not None
        print(
            f"another failure: {first.signature or first.kind} ({first.text}); the reduction pinned "
            f"{_pinned_text(pinned)}"
        )
        return OTHER_FAILURE
    if hits:
        print(f"the pinned failure in {len(hits)} of {judged} samples; fail_if {spec.get('fail_if')} needs {needed}")
    return NOT_REPRODUCED


def _runtime_error(exc: Exception, match: str | None = None) -> Observed:
    """A runtime's exception as the check names it; a runtime without an op cannot run the check."""
    message = f"{type(exc).__name__}: {exc}"
    if match is not None and re.search(match, message):
        return Observed(f"error:match={match}", f"the runtime raised: {message[:500]}")
    if (missing := _NOT_REGISTERED.search(message)) is not None:
        op = missing.group("op") or missing.group("trt")
        raise CannotRunError(f"the runtime here has no implementation of op {op}: {message[:300]}")
    return Observed(f"error:{type(exc).__name__}", f"the runtime raised: {message[:500]}")


# --- kinds -----------------------------------------------------------------------------------------


def check_accuracy(spec: Mapping[str, Any], model_path: Path, save: str | None) -> int:
    """kind compare (reference runtime vs target runtime) or golden (stored values vs target)."""
    model = onnx.load(str(model_path), load_external_data=False)
    golden = _npz_samples("golden")
    judged = _npz_samples("inputs")
    outputs = [o.name for o in model.graph.output]
    target = spec["target"]
    print(f"target: {_label(target)}; tolerance: {json.dumps(spec.get('tolerance', {}))}")
    print(f"pinned by the reduction: {_pinned_text(pinned_of(spec))}")
    samples: list[dict[str, np.ndarray] | None] = [*golden] or [None]
    results: list[Observed | None] = []
    for i, sample in enumerate(samples):
        feeds, source = feeds_for(model, spec, sample, judged[i] if i < len(judged) else None)
        print(f"sample {i}: inputs = {source}")
        try:
            if spec["kind"] == "golden":
                assert sample is not None
                reference = {name: sample[name] for name in outputs if name in sample}
                print(f"sample {i}: reference = golden values of {', '.join(reference) or 'no output'}")
            else:
                print(f"sample {i}: reference = {_label(spec['reference'])}")
                reference = run_model(model_path, "reference", spec["reference"], feeds)
            observed = run_model(model_path, "target", target, feeds)
        except CannotRunError:
            raise
        except Exception as exc:  # noqa: BLE001 - a runtime error is a failure of its own
            result = _runtime_error(exc)
            print(f"sample {i}: {result.text}")
            results.append(result)
            continue
        if i == 0:
            _save(save, "expected.npz", reference)
            _save(save, "observed.npz", observed)
        mismatches = {
            name: m
            for name, value in observed.items()
            if name in reference and (m := compare_tensor(name, reference[name], value, *_tolerance(spec, name)))
        }
        for name in observed:
            print(f"sample {i}: compared output {name}" + ("" if name in reference else " (no reference: skipped)"))
        for line in mismatches.values():
            print(f"sample {i}: MISMATCH {line}")
        if not mismatches:
            results.append(None)
            continue
        nonfinite = any(NONFINITE_PREFIX in m for m in mismatches.values())
        signature = "mismatch:nonfinite" if nonfinite else "mismatch:tolerance"
        results.append(Observed(signature, f"sample {i}: {signature} on {', '.join(mismatches)}", list(mismatches)))
    if all(r is None for r in results):
        print("every output within tolerance")
    return decide(spec, results, outputs)


def check_error(spec: Mapping[str, Any], model_path: Path, save: str | None) -> int:
    """kind error: the target runtime raises (an error matching ``match`` when given)."""
    model = onnx.load(str(model_path), load_external_data=False)
    match = spec.get("match")
    print(f"target: {_label(spec['target'])}; failure: the runtime raises" + (f" matching {match!r}" if match else ""))
    print(f"pinned by the reduction: {_pinned_text(pinned_of(spec))}")
    judged = _npz_samples("inputs")
    samples: list[dict[str, np.ndarray] | None] = [*_npz_samples("golden")] or [None]
    results: list[Observed | None] = []
    for i, sample in enumerate(samples):
        feeds, source = feeds_for(model, spec, sample, judged[i] if i < len(judged) else None)
        print(f"sample {i}: inputs = {source}")
        try:
            observed = run_model(model_path, "target", spec["target"], feeds)
        except CannotRunError:
            raise
        except Exception as exc:  # noqa: BLE001 - the target's errors are what this check looks for
            result = _runtime_error(exc, match)
            print(f"sample {i}: {result.text}")
            results.append(result)
            continue
        if i == 0:
            _save(save, "observed.npz", observed)
        print(f"sample {i}: the runtime ran without error")
        results.append(None)
    return decide(spec, results)


def check_op_present(spec: Mapping[str, Any], model_path: Path, save: str | None) -> int:
    target = spec.get("target")
    if target is not None:  # the ops are looked for in the graph onnxruntime optimized for the target
        with tempfile.TemporaryDirectory() as tmp:
            saved = Path(tmp) / "optimized.onnx"
            try:
                ort_session(converted_model(model_path, "target", target), target, saved)
            except CannotRunError:
                raise
            except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
                return decide(spec, [_runtime_error(exc)])
            print(f"in the graph onnxruntime optimized ({_label(target)})")
            model = onnx.load(str(saved), load_external_data=False)
    else:
        model = onnx.load(str(model_path), load_external_data=False)
    ops = sorted({n.op_type for n in model.graph.node if n.op_type in spec.get("ops", [])})
    names = sorted({n.name for n in model.graph.node if n.name in spec.get("names", [])})
    print(f"looking for ops {spec.get('ops', [])} and node names {spec.get('names', [])}")
    print(f"present: {', '.join(ops + names) or 'none'}")
    if not ops + names:
        return decide(spec, [None])
    return decide(spec, [Observed("op-present:" + ",".join(ops + names), f"present: {', '.join(ops + names)}")])


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def judge_command(spec: Mapping[str, Any], code: int, output: str) -> Observed | None:
    """The check's rule (Polygraphy's): ignored codes pass; with fail codes only those fail (and
    also need a regex match when regexes are given); otherwise a regex match fails (even with exit
    0) or, without regexes, any non-zero exit fails; a death by signal that neither decides is a
    crash. The signature is the check's: ``exit=N``, ``regex=R`` or ``exit=N;regex=R``."""
    regexes = [re.compile(r) for r in spec.get("fail_regex", [])]
    matched = [r.pattern for r in regexes if r.search(output)]
    if matched:
        print(f"matched: {', '.join(matched)}")
    if code in spec.get("ignore_fail_codes", []):
        return None
    if spec.get("fail_codes"):
        failed = code in spec["fail_codes"] and (bool(matched) or not regexes)
    elif code < 0 and not regexes:
        name = _signal_name(-code)
        return Observed(f"signal={name}", f"killed by {name}", kind="crash")
    else:
        failed = bool(matched) if regexes else code != 0
    if not failed:
        return None
    if not matched:
        return Observed(f"exit={code}", f"exit code {code}")
    signature = f"exit={code};regex={matched[0]}" if spec.get("fail_codes") else f"regex={matched[0]}"
    return Observed(signature, f"exit code {code}, matched {matched[0]!r}")


def _command_pinned(observed: Observed, pinned: Mapping[str, Any]) -> bool:
    """A command's pinned failure: the same exit code (``exit=N``), the same regex matched
    (``regex=R``), both when both were pinned, the same signal; a timeout only for a timeout; any
    failure with ``pinning: off``."""
    if observed.kind == "timeout" or pinned.get("kind") == "timeout":
        return observed.kind == pinned.get("kind")
    if pinned.get("pinning") == "off":
        return True
    return observed.kind == pinned.get("kind", "fail") and observed.signature == str(pinned.get("signature", ""))


def check_command(spec: Mapping[str, Any], model_path: Path, save: str | None) -> int:
    """kind command: the reduction's command, run on MODEL (``{model}`` and the iteration artifact's
    name in the command stand for it), judged by exit code and regexes as the check judged it. A
    command that is not installed here cannot run the check (exit 2)."""
    artifact = spec.get("artifact") or ""
    pinned = pinned_of(spec)
    print(f"pinned by the reduction: {_pinned_text(pinned)}")
    folder = Path(tempfile.mkdtemp(prefix="repro-"))
    try:
        files = HERE / "check_files"
        if files.is_dir():
            shutil.copytree(files, folder, dirs_exist_ok=True)
        model_copy = folder / (Path(artifact).name if artifact else model_path.name)
        shutil.copyfile(model_path, model_copy)
        data = model_path.with_name(model_path.name + ".data")
        if data.exists():
            shutil.copyfile(data, folder / data.name)
        command = [part.replace("{model}", str(model_copy)) for part in spec["command"]]
        if artifact:
            command = [str(model_copy) if part == artifact else part for part in command]
        print(f"running: {shlex.join(command)} (in a scratch folder holding the model as {model_copy.name})")
        try:
            proc = subprocess.run(
                command, cwd=folder, capture_output=True, text=True, timeout=spec.get("timeout"), check=False
            )
        except FileNotFoundError as exc:
            raise CannotRunError(f"the command {command[0]!r} is not installed here ({exc.strerror})") from exc
        except PermissionError as exc:
            raise CannotRunError(f"the command {command[0]!r} cannot be run here ({exc.strerror})") from exc
        except subprocess.TimeoutExpired:
            print(f"the command ran past its timeout of {spec.get('timeout')} s")
            observed: Observed | None = Observed("timeout", "timed out", kind="timeout")
        else:
            output = proc.stdout + proc.stderr
            print(f"exit code {proc.returncode}; output:\n{output[-4000:]}")
            observed = judge_command(spec, proc.returncode, output)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if observed is None:
        return NOT_REPRODUCED
    if _command_pinned(observed, pinned):
        return REPRODUCED
    print(f"another failure: {observed.signature} ({observed.text}); the reduction pinned {_pinned_text(pinned)}")
    return OTHER_FAILURE


KINDS = {
    "compare": check_accuracy,
    "golden": check_accuracy,
    "error": check_error,
    "op-present": check_op_present,
    "command": check_command,
}


def _label(runtime: Mapping[str, Any]) -> str:
    parts = [runtime.get("runtime", "onnxruntime"), runtime.get("precision", "fp32")]
    if parts[0] == "onnxruntime":
        parts += [runtime.get("provider") or "CPUExecutionProvider", f"opt={runtime.get('optimization', 'all')}"]
    return "/".join(parts)


def polygraphy_line(spec: Mapping[str, Any], model_path: Path) -> str | None:
    """The equivalent ``polygraphy run`` command line(s), where one exists (compare, error)."""
    if spec["kind"] not in ("compare", "error"):
        return None
    inputs = ["--load-inputs", "inputs.json"] if (HERE / "inputs.json").exists() else []
    runs: list[tuple[str, list[str]]] = []
    for role in ("reference", "target"):
        runtime = spec.get(role)
        if runtime is None:
            continue
        name = model_path.name
        if runtime.get("runtime") == "tensorrt":
            precision = runtime.get("precision", "fp32")
            flags = ["--trt", *([f"--{precision}"] if precision != "fp32" else [])]
        else:
            flags = ["--onnxrt"]
            if runtime.get("provider") not in (None, "CPUExecutionProvider"):
                flags += ["--providers", str(runtime["provider"]).removesuffix("ExecutionProvider").lower()]
            if runtime.get("precision", "fp32") != "fp32":
                name = f"{model_path.stem}.{role}.onnx"  # the converted model the bundle ships
        runs.append((name, flags))
    tolerance = spec.get("tolerance") or {}
    tol = ["--atol", str(tolerance.get("atol")), "--rtol", str(tolerance.get("rtol"))] if tolerance else []
    if len(runs) == 1:
        return shlex.join(["polygraphy", "run", runs[0][0], *runs[0][1], *inputs])
    (ref_model, ref_flags), (tgt_model, tgt_flags) = runs
    if ref_model == tgt_model:
        return shlex.join(["polygraphy", "run", ref_model, *ref_flags, *tgt_flags, *inputs, *tol])
    first = ["polygraphy", "run", ref_model, *ref_flags, *inputs, "--save-outputs", "expected.json"]
    second = ["polygraphy", "run", tgt_model, *tgt_flags, *inputs, "--load-outputs", "expected.json", *tol]
    return shlex.join(first) + " && " + shlex.join(second)


VERDICTS = {
    REPRODUCED: "REPRODUCED: the failure reproduces",
    NOT_REPRODUCED: "NOT REPRODUCED: the model passes the check",
    OTHER_FAILURE: "ANOTHER FAILURE: the model fails, but not with the failure the reduction pinned",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("model", nargs="?", default=str(HERE / "min_bad.onnx"), help="default: min_bad.onnx")
    parser.add_argument("--save-outputs", default=None, metavar="FOLDER", help="write expected.npz/observed.npz")
    args = parser.parse_args(argv)
    spec = json.loads((HERE / "check.json").read_text())
    model_path = Path(args.model).resolve()
    print(f"check: kind {spec['kind']} on {model_path.name}")
    line = polygraphy_line(spec, model_path)
    if line:
        print(f"polygraphy equivalent: {line}")
    try:
        code = KINDS[spec["kind"]](spec, model_path, args.save_outputs)
    except CannotRunError as exc:
        print(f"CANNOT RUN: cannot run the check here: {exc}")
        return CANNOT_RUN
    except ImportError as exc:
        print(f"CANNOT RUN: cannot run the check here: {exc} (pip install onnx onnxruntime numpy)")
        return CANNOT_RUN
    except Exception as exc:  # noqa: BLE001 - repro.py's own failure is no verdict on the model
        print(f"CANNOT RUN: cannot run the check here: repro.py failed: {type(exc).__name__}: {exc}")
        return CANNOT_RUN
    print(VERDICTS[code])
    _print_passes()
    _print_releases()
    return code


def _print_passes() -> None:
    """What ``onnx-reducer bisect-passes --bundle`` found (``passes.json`` beside this script)."""
    path = HERE / "passes.json"
    if not path.exists():
        return
    answer = json.loads(path.read_text())
    print(f"optimizers (onnx-reducer bisect-passes): {answer.get('message', '')}")
    if answer.get("outcome") == "optimizers":
        field = "disabled_optimizers" if answer.get("runtime") == "onnxruntime" else "disabled_build_options"
        print(f"  {field}={json.dumps(answer.get('optimizers', []))}")


def _print_releases() -> None:
    """What ``onnx-reducer bisect-releases --bundle`` found (``releases.json`` beside this script):
    the first failing and the last passing onnxruntime release, and the release to pin."""
    path = HERE / "releases.json"
    if not path.exists():
        return
    answer = json.loads(path.read_text())
    print(f"releases (onnx-reducer bisect-releases): {answer.get('message', '')}")
    if answer.get("last_passing"):
        print(f"  pin the last passing release: pip install onnxruntime=={answer['last_passing']}")
    if answer.get("first_failing"):
        print(f"  reproduce on the first failing one: pip install onnxruntime=={answer['first_failing']}")


def polygraphy_inputs_json(samples: Sequence[Mapping[str, np.ndarray]]) -> str:
    """``polygraphy run --load-inputs`` JSON: a list of feed dicts of encoded arrays."""

    def encode(value: np.ndarray) -> dict[str, str]:
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(value), allow_pickle=False)
        return {"array": base64.b64encode(buffer.getvalue()).decode(), "polygraphy_class": "ndarray"}

    return json.dumps([{name: encode(value) for name, value in sample.items()} for sample in samples])


if __name__ == "__main__":
    sys.exit(main())

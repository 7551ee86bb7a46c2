"""onnxruntime helpers for the shell: the highest IR version it loads, and fallback inference
(every intermediate tensor's dtype, shape and value from one CPU run). Imported lazily.

The model being reduced is hostile until proven otherwise: a crashing or memory-hungry model must
not take the worker (or the API process, in embedded mode) down with it. The shell therefore runs
fallback inference through ``isolated_fallback_inference``: a fresh interpreter in its own
process group with a time limit (``checks.isolated.run_isolated``), which gets the model and its
inputs in a private temporary folder and returns every tensor's metadata (JSON) and value (an
uncompressed ``.npz``, read back without pickle). ``fallback_inference`` is the same run in this
process (for tests and tools that trust their model)."""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from checks.isolated import run_isolated
from reducer_core.modelio import WeightSources, write_iteration_model
from reducer_core.prepare import TensorMeta, mark_all_outputs
from reducer_core.tensors import TensorMap
from reducer_core.verdict import VerdictKind


@functools.cache
def max_ir_version() -> int | None:
    """The newest ONNX IR version the installed onnxruntime loads (None if it is not installed)."""
    try:
        import onnxruntime as ort  # noqa: PLC0415 - optional here: without onnxruntime the answer is None
    except ImportError:
        return None
    node = onnx.helper.make_node("Identity", ["x"], ["y"])
    info = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        [node], "probe", [info("x", onnx.TensorProto.FLOAT, [1])], [info("y", onnx.TensorProto.FLOAT, [1])]
    )
    for version in range(onnx.IR_VERSION, 6, -1):
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
        model.ir_version = version
        try:
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            return version
        except Exception:  # noqa: BLE001 - onnxruntime raises its own exception types
            continue
    return None


_NP_FROM_ONNX: dict[int, type] = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.BOOL: np.bool_,
}


def random_inputs(model: onnx.ModelProto, seed: int = 1, low: float = 0.0, high: float = 1.0) -> TensorMap:
    """Inputs like Polygraphy's default data loader: uniform in [low, high), symbolic dims -> 1."""
    rng = np.random.default_rng(seed)
    return {name: tensor_like(rng, t, shape, low, high) for name, (t, shape) in input_signatures(model).items()}


def input_signatures(model: onnx.ModelProto) -> dict[str, tuple[int, list[int]]]:
    """name -> (onnx element type, shape with symbolic dims as 1) for every graph input."""
    initializers = {t.name for t in model.graph.initializer}
    signatures: dict[str, tuple[int, list[int]]] = {}
    for inp in model.graph.input:
        if inp.name not in initializers:
            tensor_type = inp.type.tensor_type
            shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
            signatures[inp.name] = (tensor_type.elem_type, shape)
    return signatures


def tensor_like(rng: np.random.Generator, elem_type: int, shape: list[int], low: float, high: float) -> np.ndarray:
    """Uniform values in [low, high) of the numpy dtype matching ``elem_type`` (float32 if unknown)."""
    dtype = _NP_FROM_ONNX.get(elem_type, np.float32)
    if np.issubdtype(dtype, np.floating):
        return rng.uniform(low, high, size=shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)


FALLBACK_ENTRY = "checks.ort_runtime:fallback_child"
FALLBACK_TIMEOUT_S = 600.0


class FallbackInferenceError(RuntimeError):
    """The isolated fallback inference run crashed, timed out or failed."""


def _prepared(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray] | None, seed: int
) -> tuple[onnx.ModelProto, TensorMap]:
    """The model with every node output marked as an output (IR capped), and its graph inputs'
    values: ``feeds`` where given, generated otherwise."""
    marked = mark_all_outputs(model)
    cap = max_ir_version()
    if cap is not None:
        marked.ir_version = min(marked.ir_version, cap)
    inputs = dict(feeds) if feeds else {}
    for name, value in random_inputs(marked, seed).items():
        inputs.setdefault(name, value)
    graph_inputs = {i.name for i in marked.graph.input}
    return marked, {k: v for k, v in inputs.items() if k in graph_inputs}


def _run(path: Path, inputs: Mapping[str, np.ndarray]) -> TensorMap:
    import onnxruntime as ort  # noqa: PLC0415 - onnxruntime loads only in the process that runs the model

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    results = session.run(names, dict(inputs))
    return {name: np.asarray(value) for name, value in zip(names, results, strict=True)}


def _meta(value: np.ndarray) -> TensorMeta:
    array = np.asarray(value)
    return TensorMeta(onnx.helper.np_dtype_to_tensor_dtype(array.dtype), tuple(array.shape))


def fallback_inference(
    model: onnx.ModelProto,
    sources: WeightSources,
    feeds: Mapping[str, np.ndarray] | None = None,
    seed: int = 1,
) -> tuple[dict[str, TensorMeta], TensorMap]:
    """Run ``model`` once on onnxruntime CPU, in this process, with every node output marked as
    a graph output. The shell uses ``isolated_fallback_inference`` instead."""
    marked, inputs = _prepared(model, feeds, seed)
    with tempfile.TemporaryDirectory(prefix="onnx-reducer-fallback-") as tmp:
        path = Path(tmp) / "fallback.onnx"
        write_iteration_model(marked, path, sources)
        values: TensorMap = {**inputs, **_run(path, inputs)}
    return {name: _meta(v) for name, v in values.items()}, values


def isolated_fallback_inference(
    model: onnx.ModelProto,
    sources: WeightSources,
    feeds: Mapping[str, np.ndarray] | None = None,
    seed: int = 1,
    work_dir: Path | None = None,
    timeout_s: float | None = None,
) -> tuple[dict[str, TensorMeta], TensorMap]:
    """``fallback_inference`` in a child process (see the module doc). ``work_dir``: where the
    private folder for the model and the tensors goes (beside the weights, so that they are
    hardlinked rather than copied); ``timeout_s`` defaults to ``FALLBACK_TIMEOUT_S``. Raises
    ``FallbackInferenceError`` when the child crashes, times out or fails."""
    marked, inputs = _prepared(model, feeds, seed)
    with tempfile.TemporaryDirectory(prefix="onnx-reducer-fallback-", dir=work_dir) as tmp:
        folder = Path(tmp)
        write_iteration_model(marked, folder / "fallback.onnx", sources)
        names = list(inputs)
        np.savez(folder / "inputs.npz", *(inputs[n] for n in names))
        payload = {
            "entry": FALLBACK_ENTRY,
            "model": str(folder / "fallback.onnx"),
            "inputs": str(folder / "inputs.npz"),
            "input_names": names,
            "values": str(folder / "values.npz"),
            "metas": str(folder / "metas.json"),
        }
        limit = FALLBACK_TIMEOUT_S if timeout_s is None else timeout_s
        verdict, output = run_isolated(payload, limit)
        if verdict.kind is not VerdictKind.PASS:
            label = f"{verdict.kind.value} {verdict.signature}".strip()
            raise FallbackInferenceError(f"{label}: {verdict.detail}; {output[-300:]}".strip("; "))
        return _read_results(folder, inputs)


def _read_results(folder: Path, inputs: TensorMap) -> tuple[dict[str, TensorMeta], TensorMap]:
    described = json.loads((folder / "metas.json").read_text())
    metas = {name: _meta(value) for name, value in inputs.items()}
    metas.update({name: TensorMeta(int(t), tuple(int(d) for d in shape)) for name, t, shape in described["metas"]})
    values: TensorMap = dict(inputs)
    with np.load(folder / "values.npz", allow_pickle=False) as stored:
        for i, name in enumerate(described["stored"]):
            values[name] = stored[f"arr_{i}"]
    return metas, values


def fallback_child(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The child's side of ``isolated_fallback_inference`` (``checks.child`` calls it)."""
    with np.load(payload["inputs"], allow_pickle=False) as stored:
        inputs = {name: stored[f"arr_{i}"] for i, name in enumerate(payload["input_names"])}
    results = _run(Path(payload["model"]), inputs)
    metas = [(name, *_meta_json(value)) for name, value in results.items()]
    stored_names = [name for name, value in results.items() if value.dtype != object]  # no pickle
    np.savez(payload["values"], *(results[n] for n in stored_names))
    Path(payload["metas"]).write_text(json.dumps({"metas": metas, "stored": stored_names}))
    return {"kind": "pass", "signature": "", "detail": f"{len(results)} tensors", "output": ""}


def _meta_json(value: np.ndarray) -> tuple[int, list[int]]:
    return int(_meta(value).elem_type), [int(d) for d in value.shape]

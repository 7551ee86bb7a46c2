"""onnxruntime helpers for the shell: the highest IR version it loads, and fallback inference
(every intermediate tensor's dtype, shape and value from one CPU run). Imported lazily."""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx

from reducer_core.modelio import WeightSources, write_iteration_model
from reducer_core.prepare import TensorMeta, mark_all_outputs
from reducer_core.tensors import TensorMap


@functools.cache
def max_ir_version() -> int | None:
    """The newest ONNX IR version the installed onnxruntime loads (None if it is not installed)."""
    try:
        import onnxruntime as ort
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


_NP_FROM_ONNX = {
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
    initializers = {t.name for t in model.graph.initializer}
    feeds: TensorMap = {}
    for inp in model.graph.input:
        if inp.name in initializers:
            continue
        tensor_type = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
        dtype = _NP_FROM_ONNX.get(tensor_type.elem_type, np.float32)
        if np.issubdtype(dtype, np.floating):
            feeds[inp.name] = rng.uniform(low, high, size=shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[inp.name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        else:
            feeds[inp.name] = rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return feeds


def fallback_inference(
    model: onnx.ModelProto,
    sources: WeightSources,
    feeds: Mapping[str, np.ndarray] | None = None,
    seed: int = 1,
) -> tuple[dict[str, TensorMeta], TensorMap]:
    """Run ``model`` once on onnxruntime CPU with every node output marked as a graph output."""
    import onnxruntime as ort

    marked = mark_all_outputs(model)
    cap = max_ir_version()
    if cap is not None:
        marked.ir_version = min(marked.ir_version, cap)
    inputs = dict(feeds) if feeds else {}
    for name, value in random_inputs(marked, seed).items():
        inputs.setdefault(name, value)
    graph_inputs = {i.name for i in marked.graph.input}
    with tempfile.TemporaryDirectory(prefix="onnx-reducer-fallback-") as tmp:
        path = Path(tmp) / "fallback.onnx"
        write_iteration_model(marked, path, sources)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        results = session.run(names, {k: v for k, v in inputs.items() if k in graph_inputs})
    values: TensorMap = {
        **{k: v for k, v in inputs.items() if k in graph_inputs},
        **dict(zip(names, results, strict=True)),
    }
    metas = {
        name: TensorMeta(onnx.helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), tuple(np.asarray(v).shape))
        for name, v in values.items()
    }
    return metas, values

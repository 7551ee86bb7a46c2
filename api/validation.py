"""Validate an uploaded model before a job exists: it parses, its external data is safe and in
bounds, no tensor declares far more bytes than were uploaded, the graph has no cycle and every
operator is known. Errors become 422 problems that say what is wrong."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from api.problems import ProblemError
from reducer_core import modelio
from reducer_core.errors import InvalidModelError, UnsafeExternalDataError
from reducer_core.graph import topological_order


def _invalid(detail: str, title: str = "Invalid model") -> ProblemError:
    return ProblemError(422, title, detail)


def validate_model(path: Path, upload_bytes: int, floor: int, factor: int, max_nodes: int) -> int:
    """Returns the node count; raises ProblemError (422) otherwise."""
    try:
        model, sources = modelio.load_model(path)
    except UnsafeExternalDataError as exc:
        raise _invalid(str(exc), "Unsafe external data") from exc
    except InvalidModelError as exc:
        raise _invalid(str(exc)) from exc
    if not model.HasField("graph") or not model.opset_import:
        raise _invalid("The upload parsed, but it has no graph or no opset: it is not an ONNX model (truncated?).")
    nodes = count_nodes(model.graph)
    if nodes > max_nodes:
        raise _invalid(
            f"The model has {nodes} nodes (subgraphs included); this server takes at most {max_nodes} "
            "(MAX_MODEL_NODES). Cut the model first (e.g. onnx.utils.extract_model) or ask the operator.",
            "Model too large",
        )
    _refuse_custom_code_ops(model.graph)
    limit = max(floor, factor * upload_bytes)
    _check_declared_sizes(model, sources, limit)
    _check_inferred_sizes(model, limit)
    available = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    try:
        topological_order(list(model.graph.node), available)
    except InvalidModelError as exc:
        raise _invalid(str(exc)) from exc
    try:
        onnx.checker.check_model(str(path))
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise _invalid(f"The ONNX checker rejects the model: {str(exc).strip()[:600]}") from exc
    return len(model.graph.node)


def _subgraphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    found: list[onnx.GraphProto] = []
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found.append(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                found.extend(attr.graphs)
    return found


def count_nodes(graph: onnx.GraphProto) -> int:
    """Nodes of the graph and of every nested body (If, Loop, Scan)."""
    return len(graph.node) + sum(count_nodes(sub) for sub in _subgraphs(graph))


# Ops that run code given in the model itself (onnxruntime's language-interop ops): never accepted.
CODE_OPS = frozenset({("com.microsoft", "PyOp"), ("com.microsoft", "PythonOp"), ("com.microsoft", "PythonOpGrad")})


def _refuse_custom_code_ops(graph: onnx.GraphProto) -> None:
    for node in graph.node:
        if (node.domain, node.op_type) in CODE_OPS:
            raise _invalid(
                f"Node '{node.name[:200]}' is {node.domain}:{node.op_type}, which runs Python code named in the "
                "model; such ops are not accepted. Remove it or replace it with standard ops.",
                "Unsafe operator",
            )
    for sub in _subgraphs(graph):
        _refuse_custom_code_ops(sub)


# Ops whose output size comes from the values of an input (or an attribute), not only from the
# input shapes: the ones a small model can use to ask for a huge tensor.
SIZE_FROM_VALUES_OPS = frozenset(
    {
        "ConstantOfShape",
        "Expand",
        "Tile",
        "Range",
        "Resize",
        "Upsample",
        "Pad",
        "OneHot",
        "RandomNormal",
        "RandomUniform",
        "EyeLike",
        "Reshape",
        "Col2Im",
        "CenterCropPad",
    }
)


def _uses_size_ops(graph: onnx.GraphProto) -> bool:
    return any(n.op_type in SIZE_FROM_VALUES_OPS for n in graph.node) or any(
        _uses_size_ops(sub) for sub in _subgraphs(graph)
    )


def _check_inferred_sizes(model: onnx.ModelProto, limit: int) -> None:
    """Shapes computed from constants (ConstantOfShape, Expand, Tile, Range, Resize, Pad... with
    constant sizes, through Concat/Shape arithmetic: ONNX shape inference with data propagation)
    must not promise tensors far beyond the upload: such a model exhausts memory when it runs.
    Models without such ops skip the (costly) inference."""
    if not _uses_size_ops(model.graph):
        return
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is best effort here; the checker judges the model
        return
    for info in [*inferred.graph.value_info, *inferred.graph.output]:
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in info.type.tensor_type.shape.dim]
        if not dims or any(d <= 0 for d in dims):  # a scalar, or an empty tensor
            continue
        declared = math.prod(dims) * max(_itemsize(info.type.tensor_type.elem_type), 1)
        if declared > limit:
            producer = next((n for n in model.graph.node if info.name in n.output), None)
            what = f"{producer.op_type} node '{producer.name[:200]}'" if producer is not None else "a node"
            raise _invalid(
                f"Tensor '{info.name[:200]}' (output of {what}) would have shape {dims[:8]} ({declared} bytes), "
                f"far beyond this upload (limit {limit} bytes); a constant size makes it that large. Fix the "
                "sizes or upload a model of that size.",
                "Tensor size beyond the upload",
            )


def _itemsize(data_type: int) -> int:
    if data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return 0
    try:
        return int(np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize)
    except (KeyError, TypeError, ValueError):
        return 1


def _stored_bytes(tensor: onnx.TensorProto, sources: modelio.WeightSources) -> int:
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        info = {e.key: e.value for e in tensor.external_data}
        if "length" in info:
            return int(info["length"])
        return sources.files[info["location"]].stat().st_size - int(info.get("offset", 0))
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data)
    fields = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data")
    count = sum(len(getattr(tensor, name)) for name in fields)
    return count * _itemsize(tensor.data_type)


def _check_declared_sizes(model: onnx.ModelProto, sources: modelio.WeightSources, limit: int) -> None:
    """A tensor whose dims promise more bytes than it carries is a bomb (or a broken model)."""
    for tensor in modelio.all_tensors(model.graph):
        declared = math.prod(tensor.dims) * _itemsize(tensor.data_type)
        stored = _stored_bytes(tensor, sources)
        if declared > limit or declared > stored:
            raise _invalid(
                f"Tensor '{tensor.name}' declares {declared} bytes (dims {list(tensor.dims)}) but the upload holds "
                f"{stored} for it; refusing a tensor far beyond the upload.",
                "Tensor size beyond the upload",
            )
    for info in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        dims = [d.dim_value for d in info.type.tensor_type.shape.dim if d.HasField("dim_value")]
        declared = math.prod(dims) * _itemsize(info.type.tensor_type.elem_type) if dims else 0
        if declared > limit:
            raise _invalid(
                f"Tensor '{info.name}' declares shape {dims} ({declared} bytes), far beyond this upload "
                f"(limit {limit} bytes); fix the shape or upload a model of that size.",
                "Tensor size beyond the upload",
            )

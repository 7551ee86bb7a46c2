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


def validate_model(path: Path, upload_bytes: int, floor: int, factor: int) -> int:
    """Returns the node count; raises ProblemError (422) otherwise."""
    try:
        model, sources = modelio.load_model(path)
    except UnsafeExternalDataError as exc:
        raise _invalid(str(exc), "Unsafe external data") from exc
    except InvalidModelError as exc:
        raise _invalid(str(exc)) from exc
    if not model.HasField("graph") or not model.opset_import:
        raise _invalid("The upload parsed, but it has no graph or no opset: it is not an ONNX model (truncated?).")
    _check_declared_sizes(model, sources, max(floor, factor * upload_bytes))
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

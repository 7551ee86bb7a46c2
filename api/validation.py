"""Validate an uploaded model before a job exists: it parses, its external data is safe and in
bounds, no tensor declares far more bytes than were uploaded, the graph has no cycle and every
operator is known. Errors become 422 problems that say what is wrong."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

from api.problems import ProblemError
from checks.spec import CheckSpec
from reducer_core import modelio
from reducer_core.errors import InvalidModelError, UnsafeExternalDataError
from reducer_core.graph import topological_order


def _invalid(detail: str, title: str = "Invalid model") -> ProblemError:
    return ProblemError(422, title, detail)


def validate_model(
    path: Path, upload_bytes: int, floor: int, factor: int, max_nodes: int, spec: CheckSpec | None = None
) -> int:
    """Returns the node count; raises ProblemError (422) otherwise. ``spec``: the job's check
    (None: interactive): where it runs the model on onnxruntime, every op must be one of a domain
    onnxruntime registers or a function the model defines (``refuse_unrunnable_domains``)."""
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
    if spec is not None and runs_on_onnxruntime(spec):
        refuse_unrunnable_domains(model, spec)
    limit = max(floor, factor * upload_bytes)
    _check_declared_sizes(model, sources, limit)
    inferred = _check_inferred_sizes(model, limit)
    available = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    try:
        order = topological_order(list(model.graph.node), available)
    except InvalidModelError as exc:
        raise _invalid(str(exc)) from exc
    if inferred is not None:
        check_folded_sizes(model, inferred, order, limit)
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


# The op domains onnxruntime registers (``get_all_operator_schema()`` of onnxruntime 1.20-1.23:
# '', ai.onnx.ml, com.microsoft, com.microsoft.nchwc, com.ms.internal.nhwc; the test
# tests/service/test_intake_ops.py checks the installed one against this list) and ONNX's own.
RUNTIME_DOMAINS = frozenset(
    {
        "",
        "ai.onnx",
        "ai.onnx.ml",
        "ai.onnx.preview",
        "ai.onnx.preview.training",
        "com.microsoft",
        "com.microsoft.nchwc",
        "com.ms.internal.nhwc",
    }
)
RUNTIMES_WITHOUT_DOMAINS = frozenset({"tensorrt"})  # plugins are found by op name, in any domain


def runs_on_onnxruntime(spec: CheckSpec) -> bool:
    """The check runs the model on onnxruntime (op-present, command and interactive checks run no
    runtime of ours; TensorRT finds plugins by name, whatever their domain)."""
    runtimes = [r.runtime for r in (spec.reference, spec.target) if r is not None]
    return spec.kind in ("compare", "golden", "error") and any(r not in RUNTIMES_WITHOUT_DOMAINS for r in runtimes)


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    return [*graph.node, *(node for sub in _subgraphs(graph) for node in _all_nodes(sub))]


def refuse_unrunnable_domains(model: onnx.ModelProto, spec: CheckSpec) -> None:
    """An op of a domain no runtime registers (and no function of the model defines) makes every
    run of the model an ``op-not-registered`` crash: the job could never start. An ``error`` check
    whose ``match`` covers onnxruntime's "is not a registered function/op" asked for just that."""
    functions = {(f.domain, f.name) for f in model.functions}
    for node in _all_nodes(model.graph):
        if node.domain in RUNTIME_DOMAINS or (node.domain, node.op_type) in functions:
            continue
        message = f"{node.domain}:{node.op_type}(-1) is not a registered function/op"
        if spec.kind == "error" and spec.match is not None and re.search(spec.match, message):
            continue
        raise _invalid(
            f"Node '{node.name[:200]}' is op {node.op_type[:100]} of domain '{node.domain[:100]}', which onnxruntime "
            "does not register and the model defines no function for: every check of this model would crash "
            "with 'not a registered function/op'. Replace it with standard ops, define it as a function in the "
            "model (model.functions), run the check on TensorRT (target: {runtime: tensorrt}) if it is a plugin, "
            "or use kind 'error' with a match covering 'is not a registered function/op' to reduce that error.",
            "Operator no runtime registers",
        )


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


def _check_inferred_sizes(model: onnx.ModelProto, limit: int) -> onnx.ModelProto | None:
    """Shapes computed from constants (ConstantOfShape, Expand, Tile, Range, Resize, Pad... with
    constant sizes, through Concat/Shape arithmetic: ONNX shape inference with data propagation)
    must not promise tensors far beyond the upload: such a model exhausts memory when it runs.
    Models without such ops skip the (costly) inference. Returns the inferred model (None: no
    size ops, or the inference failed)."""
    if not _uses_size_ops(model.graph):
        return None
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is best effort here; the checker judges the model
        return None
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
    return inferred


# Small constant computations folded at intake to find the sizes ONNX's shape inference leaves
# open (a Tile whose repeats are a Mul of constants): the ops folded, on inputs of at most
# FOLD_MAX_ELEMENTS elements each (shape vectors; a product of two stays small).
FOLDED_OPS = frozenset(
    {
        "Identity", "Cast", "Concat", "Mul", "Add", "Sub", "Div", "Max", "Min", "Abs", "Neg", "Floor", "Ceil",
        "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Gather", "Slice", "ReduceProd", "ReduceSum", "ReduceMax",
        "ReduceMin", "Transpose", "Constant",
    }
)  # fmt: skip
FOLD_MAX_ELEMENTS = 64
_Shapes = dict[str, tuple[list[int | None], int]]  # tensor: dims (None: unknown), element type


def _shapes(inferred: onnx.ModelProto) -> _Shapes:
    graph = inferred.graph
    found: _Shapes = {t.name: (list(t.dims), t.data_type) for t in graph.initializer}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        tensor = info.type.tensor_type
        if info.type.HasField("tensor_type") and tensor.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
            found[info.name] = (dims, tensor.elem_type)
    return found


def _fold_node(node: onnx.NodeProto, values: dict[str, np.ndarray], shapes: _Shapes, opset: int) -> np.ndarray | None:
    if node.op_type == "Shape":
        dims = shapes.get(node.input[0], ([None], 0))[0]
        attrs = {a.name: a.i for a in node.attribute}
        picked = dims[slice(attrs.get("start"), attrs.get("end"))]
        return None if any(d is None for d in picked) else np.array(picked, dtype=np.int64)
    if node.op_type not in FOLDED_OPS or len(node.output) != 1:
        return None
    inputs = [name for name in node.input if name]
    if any(name not in values for name in inputs):
        return None
    if any(a.type == onnx.AttributeProto.TENSOR and math.prod(a.t.dims) > FOLD_MAX_ELEMENTS for a in node.attribute):
        return None
    try:
        result = ReferenceEvaluator(node, opsets={"": opset}).run(None, {name: values[name] for name in inputs})
    except Exception:  # noqa: BLE001 - folding is best effort: an op it cannot fold stays unknown
        return None
    value = np.asarray(result[0]) if isinstance(result, list) and result else None
    return value if value is not None and value.size <= FOLD_MAX_ELEMENTS else None


def _constants(model: onnx.ModelProto, shapes: _Shapes, order: list[int]) -> dict[str, np.ndarray]:
    """The values of the small constants of the main graph, folded through FOLDED_OPS."""
    values: dict[str, np.ndarray] = {}
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL and math.prod(tensor.dims) <= FOLD_MAX_ELEMENTS:
            try:
                values[tensor.name] = onnx.numpy_helper.to_array(tensor)
            except Exception:  # noqa: BLE001 - an unreadable constant stays unknown
                continue
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    nodes = model.graph.node
    for index in order:
        node = nodes[index]
        if node.domain in ("", "ai.onnx") and (value := _fold_node(node, values, shapes, opset)) is not None:
            values[node.output[0]] = value
    return values


def _sized_output(node: onnx.NodeProto, values: dict[str, np.ndarray], shapes: _Shapes) -> tuple[list[int], int] | None:
    """The output dims and element type of a Tile, Expand or ConstantOfShape whose size input is
    known (unknown input dims count as 1: a lower bound)."""

    def dims_of(name: str) -> list[int]:
        if name in values:
            return [int(d) for d in values[name].shape]
        return [d if d is not None else 1 for d in shapes.get(name, ([], 0))[0]]

    def elem_of(name: str) -> int:
        return shapes.get(name, ([], onnx.TensorProto.UNDEFINED))[1]

    if node.op_type == "ConstantOfShape" and len(node.input) == 1 and node.input[0] in values:
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        return [int(d) for d in values[node.input[0]].ravel()], value.data_type if value else onnx.TensorProto.FLOAT
    if len(node.input) != 2 or node.input[1] not in values:
        return None
    sizes = [int(d) for d in values[node.input[1]].ravel()]
    dims = dims_of(node.input[0])
    if node.op_type == "Tile" and len(sizes) == len(dims):
        return [d * r for d, r in zip(dims, sizes, strict=True)], elem_of(node.input[0])
    if node.op_type == "Expand":
        rank = max(len(dims), len(sizes))
        a, b = [1] * (rank - len(dims)) + dims, [1] * (rank - len(sizes)) + sizes
        return [max(x, y) for x, y in zip(a, b, strict=True)], elem_of(node.input[0])
    return None


def check_folded_sizes(model: onnx.ModelProto, inferred: onnx.ModelProto, order: list[int], limit: int) -> None:
    """A Tile, Expand or ConstantOfShape whose size input is computed from small constants (a Mul,
    a Concat, a Cast, a Shape of a known shape...: what ONNX's shape inference does not follow)
    must not make a tensor far beyond the upload."""
    shapes = _shapes(inferred)
    values = _constants(model, shapes, order)
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Tile", "Expand", "ConstantOfShape"):
            continue
        found = _sized_output(node, values, shapes)
        if found is None or any(d < 0 for d in found[0]):
            continue
        dims, elem_type = found
        size = math.prod(dims) * max(_itemsize(elem_type), 1)
        if size > limit:
            raise _invalid(
                f"Node '{node.name[:200]}' ({node.op_type}) would make a tensor of shape {dims[:8]} ({size} bytes) "
                f"from the constants that compute its {'shape' if node.op_type != 'Tile' else 'repeats'}, far "
                f"beyond this upload (limit {limit} bytes). Fix those constants, or upload a model of that size.",
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

"""A JSON view of an ONNX graph for the web page: nodes (name, op type, inputs, outputs), the
shape and dtype of every tensor that shape inference can tell, the graph's inputs and outputs and
an op histogram. Beyond ``max_nodes`` only the summary is given (node count, histogram, inputs and
outputs): a large model is summarised, not drawn. Weights are never loaded."""

from __future__ import annotations

import tarfile
from collections import Counter
from pathlib import Path

import onnx
from onnx import TensorProto
from pydantic import BaseModel

from api.problems import ProblemError

MAX_GRAPH_FILE_BYTES = 512 * 1024**2
_DTYPE_NAMES = {"float": "float32", "double": "float64"}

Dim = int | str | None


class TensorInfo(BaseModel):
    dtype: str | None
    shape: list[Dim] | None


class ValueOut(TensorInfo):
    name: str


class NodeOut(BaseModel):
    id: str  # the node's name, or ``Op:first_output`` for an unnamed node (stable across extraction)
    name: str
    op: str
    domain: str
    inputs: list[str]
    outputs: list[str]


class GraphOut(BaseModel):
    node_count: int
    truncated: bool
    max_nodes: int
    op_histogram: dict[str, int]
    inputs: list[ValueOut]
    outputs: list[ValueOut]
    initializers: list[str]
    nodes: list[NodeOut]
    tensors: dict[str, TensorInfo]


def dtype_name(elem_type: int) -> str | None:
    if elem_type == TensorProto.UNDEFINED:
        return None
    try:
        name = str(TensorProto.DataType.Name(elem_type)).lower()
    except ValueError:
        return str(elem_type)
    return _DTYPE_NAMES.get(name, name)


def _info(value: onnx.ValueInfoProto) -> TensorInfo:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        return TensorInfo(dtype=kind, shape=None)
    tensor = value.type.tensor_type
    shape: list[Dim] | None = None
    if tensor.HasField("shape"):
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]
    return TensorInfo(dtype=dtype_name(tensor.elem_type), shape=shape)


def _value(value: onnx.ValueInfoProto) -> ValueOut:
    return ValueOut(name=value.name, **_info(value).model_dump())


def node_id(node: onnx.NodeProto) -> str:
    return node.name or f"{node.op_type}:{node.output[0] if node.output else ''}"


def _node(node: onnx.NodeProto) -> NodeOut:
    return NodeOut(
        id=node_id(node),
        name=node.name,
        op=node.op_type,
        domain=node.domain,
        inputs=list(node.input),
        outputs=list(node.output),
    )


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with inferred value_info where onnx can tell; the model itself otherwise."""
    try:
        return onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError):
        return model


def describe_graph(model: onnx.ModelProto, max_nodes: int) -> GraphOut:
    graph = model.graph
    truncated = len(graph.node) > max_nodes
    histogram = Counter(node.op_type for node in graph.node)
    tensors: dict[str, TensorInfo] = {}
    nodes: list[NodeOut] = []
    initializers: list[str] = []
    if not truncated:
        inferred = _inferred(model).graph
        for value in [*inferred.value_info, *inferred.input, *inferred.output]:
            tensors[value.name] = _info(value)
        for init in graph.initializer:
            tensors[init.name] = TensorInfo(dtype=dtype_name(init.data_type), shape=list(init.dims))
        initializers = [init.name for init in graph.initializer]
        nodes = [_node(node) for node in graph.node]
    return GraphOut(
        node_count=len(graph.node),
        truncated=truncated,
        max_nodes=max_nodes,
        op_histogram=dict(histogram.most_common()),
        inputs=[_value(v) for v in graph.input],
        outputs=[_value(v) for v in graph.output],
        initializers=initializers,
        nodes=nodes,
        tensors=tensors,
    )


def _too_large(size: int) -> ProblemError:
    return ProblemError(
        422,
        "Model too large to draw",
        f"The model's graph file is {size} bytes (weights inline); the page reads graphs up to "
        f"{MAX_GRAPH_FILE_BYTES} bytes. Download the model to inspect it.",
    )


def _parse(data: bytes) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError and others
        raise ProblemError(422, "Not a model", "This artifact does not parse as an ONNX model.") from exc
    return model


def read_graph(path: Path, is_tar: bool) -> onnx.ModelProto:
    """The model proto of an ``.onnx`` file, or of the one ``.onnx`` member of a tar bundle, without
    its external weights."""
    if not is_tar:
        size = path.stat().st_size
        if size > MAX_GRAPH_FILE_BYTES:
            raise _too_large(size)
        return _parse(path.read_bytes())
    with tarfile.open(path) as archive:
        member = next((m for m in archive.getmembers() if m.isfile() and m.name.endswith(".onnx")), None)
        if member is None:
            raise ProblemError(422, "Not a model", "This bundle holds no .onnx file.")
        if member.size > MAX_GRAPH_FILE_BYTES:
            raise _too_large(member.size)
        handle = archive.extractfile(member)
        assert handle is not None
        return _parse(handle.read())

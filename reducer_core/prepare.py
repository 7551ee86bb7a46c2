"""Turn a loaded model into the form the engine reduces: Constant nodes lowered to initializers,
nodes topologically sorted, user input shapes applied and shapes inferred. Pure: ModelProto in,
ModelProto out (weights stay wherever they are, inline or external)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from reducer_core.control_flow import complete_control_flow_shapes
from reducer_core.errors import InvalidModelError, UsageError
from reducer_core.graph import topological_order

Shape = Sequence[int | str]
MIN_IR_VERSION = 4


@dataclass(frozen=True)
class TensorMeta:
    """dtype (onnx TensorProto enum) and shape of a tensor, e.g. from a fallback inference run."""

    elem_type: int
    shape: tuple[int | str, ...] | None


def constant_value(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor a Constant node produces, or None for forms we do not lower (sparse values)."""
    for attr in node.attribute:
        value: onnx.TensorProto | None = None
        if attr.name == "value":
            value = onnx.TensorProto()
            value.CopyFrom(attr.t)
        elif attr.name == "value_float":
            value = numpy_helper.from_array(np.array(attr.f, dtype=np.float32))
        elif attr.name == "value_floats":
            value = numpy_helper.from_array(np.array(list(attr.floats), dtype=np.float32))
        elif attr.name == "value_int":
            value = numpy_helper.from_array(np.array(attr.i, dtype=np.int64))
        elif attr.name == "value_ints":
            value = numpy_helper.from_array(np.array(list(attr.ints), dtype=np.int64))
        elif attr.name == "value_string":
            value = numpy_helper.from_array(np.array(attr.s.decode(), dtype=object))
        elif attr.name == "value_strings":
            value = numpy_helper.from_array(np.array([s.decode() for s in attr.strings], dtype=object))
        if value is not None:
            value.name = node.output[0]
            return value
    return None


def lower_constant_nodes(model: onnx.ModelProto) -> int:
    """Replace top-level Constant nodes by initializers, in place. Returns how many were lowered.

    Without this, a Constant node left outside a candidate would turn its output into a spurious
    graph input. Constants that are graph outputs themselves are kept as nodes.
    """
    graph = model.graph
    outputs = {o.name for o in graph.output}
    kept: list[onnx.NodeProto] = []
    lowered = 0
    for node in graph.node:
        value = constant_value(node) if node.op_type == "Constant" and node.domain in ("", "ai.onnx") else None
        if value is None or node.output[0] in outputs:
            kept.append(node)
            continue
        graph.initializer.append(value)
        lowered += 1
    if lowered:
        del graph.node[:]
        graph.node.extend(kept)
    return lowered


def sort_topologically(model: onnx.ModelProto) -> bool:
    """Reorder nodes topologically in place; returns True when the order changed."""
    graph = model.graph
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    nodes = list(graph.node)
    order = topological_order(nodes, available)
    if order == list(range(len(nodes))):
        return False
    del graph.node[:]
    graph.node.extend(nodes[i] for i in order)
    return True


def mark_all_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose every top-level node output is also a graph output (untyped, so
    a runtime infers it): what a layerwise run needs to see every intermediate tensor."""
    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    existing = {o.name for o in marked.graph.output}
    for node in marked.graph.node:
        for name in node.output:
            if name and name not in existing:
                marked.graph.output.append(onnx.ValueInfoProto(name=name))
                existing.add(name)
    return marked


def parse_shape_arg(text: str) -> tuple[str, list[int | str]]:
    """Parse Polygraphy's ``NAME:[d0,d1,...]`` form (dims may be symbolic names)."""
    name, sep, dims = text.rpartition(":")
    if not sep or not dims.startswith("[") or not dims.endswith("]"):
        raise UsageError(f"Cannot parse input shape '{text}'. Use NAME:[d0,d1,...], e.g. x:[1,3,224,224].")
    parts = [p.strip() for p in dims[1:-1].split(",") if p.strip()]
    return name, [int(p) if p.lstrip("-").isdigit() else p for p in parts]


def override_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Shape]) -> None:
    """Set graph input shapes in place; drops stale intermediate shapes so inference redoes them."""
    graph = model.graph
    by_name = {i.name: i for i in graph.input}
    unknown = sorted(set(shapes) - set(by_name))
    if unknown:
        raise UsageError(
            f"--model-input-shapes names {unknown}, which are not inputs of the model. Model inputs: {sorted(by_name)}."
        )
    for name, dims in shapes.items():
        tensor_type = by_name[name].type.tensor_type
        tensor_type.ClearField("shape")
        for d in dims:
            dim = tensor_type.shape.dim.add()
            if isinstance(d, int) and d >= 0:
                dim.dim_value = d
            else:
                dim.dim_param = str(d)
    del graph.value_info[:]
    for out in graph.output:
        out.type.tensor_type.ClearField("shape")


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference with data propagation; on failure the model is returned unchanged.

    Run on a model whose large weights are external (not loaded), so it stays under protobuf's 2 GB.
    """
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError):
        return model


def apply_tensor_metadata(model: onnx.ModelProto, metas: Mapping[str, TensorMeta]) -> None:
    """Record dtypes/shapes found by fallback inference as value_info, in place (inputs/outputs too)."""
    graph = model.graph
    existing = {vi.name: vi for vi in [*graph.input, *graph.output, *graph.value_info]}
    for name, meta in metas.items():
        shape = list(meta.shape) if meta.shape is not None else None
        fresh = onnx.helper.make_tensor_value_info(name, meta.elem_type, shape)
        if name in existing:
            existing[name].type.CopyFrom(fresh.type)
        else:
            graph.value_info.append(fresh)


def prepare(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, Shape] | None = None,
    shape_inference: bool = True,
) -> onnx.ModelProto:
    """Copy ``model`` into the engine's working form. Raises InvalidModelError on cycles."""
    prepared = onnx.ModelProto()
    prepared.CopyFrom(model)
    # IR < 4 requires every initializer to be listed as a graph input; from IR 4 on it may not be.
    # Candidates keep initializers as initializers only, so they need at least IR 4.
    prepared.ir_version = max(prepared.ir_version, MIN_IR_VERSION)
    if not prepared.graph.node:
        raise InvalidModelError("The model has no nodes; there is nothing to reduce.")
    lower_constant_nodes(prepared)
    sort_topologically(prepared)
    if input_shapes:
        override_input_shapes(prepared, input_shapes)
    if shape_inference:
        prepared = infer_shapes(prepared)
        if complete_control_flow_shapes(prepared):
            prepared = infer_shapes(prepared)  # downstream of the completed Loop/If outputs
    return prepared

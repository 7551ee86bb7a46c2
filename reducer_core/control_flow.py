"""Shapes of the outputs of top-level ``Loop`` and ``If`` nodes, derived from their bodies.

ONNX shape inference gives a ``Loop``'s loop-carried outputs no shape at all (a carried value may
change shape from one iteration to the next), nor the scan outputs when the body's shapes depend on
them, nor an ``If``'s outputs when inference inside a branch lost track. In the original model such
a tensor is an intermediate, where a type without a shape is valid; in a candidate it can become a
graph input or output, where the ONNX checker requires a shape (``Field 'shape' of 'type' is
required``). So before reduction, each such output gets a shape from its body:

- a body is inferred on its own (``onnx.shape_inference``), with its inputs typed from the call
  site (a Loop's iteration count and condition, and its carried values typed like their initial
  values) and the names it reads from the enclosing scope typed as in the top-level graph;
- a carried value gets the rank of its initial value when one pass through the body keeps that
  rank, and the dims that pass keeps (the others unknown); a scan output one more leading dim
  (the iteration count, unknown) than the body's scan value, whose dims stay only when every
  carried value kept its shape (every iteration then computes the same shapes);
- an ``If`` output gets the rank both branches agree on, with the dims they agree on;
- a Loop or If nested in a body is completed the same way while its body is inferred.

What stays unknown (the ranks disagree, the body cannot be inferred) is left to fallback inference
(one onnxruntime run, ``engine.workspace``), which records the shapes actually seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import onnx
from onnx import helper

from reducer_core.graph import outer_scope_names

TypeMap = Mapping[str, onnx.TypeProto]
_DEFAULT_DOMAINS = ("", "ai.onnx")


def has_shape(tensor_type: onnx.TypeProto | None) -> bool:
    return tensor_type is not None and tensor_type.HasField("tensor_type") and tensor_type.tensor_type.HasField("shape")


def type_map(graph: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    """Known types of a graph's tensors: value_info, then inputs and outputs (those win)."""
    types: dict[str, onnx.TypeProto] = {}
    for info in [*graph.value_info, *graph.input, *graph.output]:
        if info.type.WhichOneof("value") is not None:
            types[info.name] = info.type
    for init in graph.initializer:
        types.setdefault(init.name, helper.make_tensor_type_proto(init.data_type, list(init.dims)))
    return types


def complete_control_flow_shapes(model: onnx.ModelProto) -> list[str]:
    """Give shapeless outputs of top-level Loop and If nodes a shape from their bodies, in place
    (as value_info, or on the graph output). Returns the names completed."""
    types = type_map(model.graph)
    completed: list[str] = []
    for node in model.graph.node:
        if node.domain not in _DEFAULT_DOMAINS or node.op_type not in ("Loop", "If"):
            continue
        wanted = [name for name in node.output if name in types and not has_shape(types[name])]
        if not wanted:
            continue
        derived = _loop_outputs(model, node, types) if node.op_type == "Loop" else _if_outputs(model, node, types)
        for name, derived_type in zip(node.output, derived, strict=False):
            if name in wanted and derived_type is not None and _same_elem_type(types[name], derived_type):
                _record(model.graph, name, derived_type)
                completed.append(name)
    return completed


def _same_elem_type(known: onnx.TypeProto, derived: onnx.TypeProto) -> bool:
    return known.tensor_type.elem_type in (0, derived.tensor_type.elem_type)


def _record(graph: onnx.GraphProto, name: str, tensor_type: onnx.TypeProto) -> None:
    for info in [*graph.output, *graph.value_info]:
        if info.name == name:
            info.type.CopyFrom(tensor_type)
            return
    graph.value_info.append(onnx.ValueInfoProto(name=name, type=tensor_type))


def _body(node: onnx.NodeProto, name: str) -> onnx.GraphProto | None:
    for attr in node.attribute:
        if attr.name == name and attr.type == onnx.AttributeProto.GRAPH:
            graph: onnx.GraphProto = attr.g
            return graph
    return None


def _loop_outputs(model: onnx.ModelProto, node: onnx.NodeProto, types: TypeMap) -> list[onnx.TypeProto | None]:
    """Loop(M, cond, v_initial...) -> (v_final..., scan_outputs...); body (i, cond, v...) -> (cond, v..., scan...)."""
    body = _body(node, "body")
    if body is None:
        return []
    initial = [types.get(name) if name else None for name in node.input[2:]]
    call_types = loop_call_types(node, types)
    produced = infer_body(model, body, call_types, types)
    carried = produced[1 : 1 + len(initial)]
    scanned = produced[1 + len(initial) :]
    finals = [_merge(start, end) if has_shape(start) else None for start, end in zip(initial, carried, strict=False)]
    steady = all(
        final is not None and start is not None and final.tensor_type.shape == start.tensor_type.shape
        for start, final in zip(initial, finals, strict=True)
    )
    return [*finals, *(_stacked(value, keep_dims=steady) for value in scanned)]


def _if_outputs(model: onnx.ModelProto, node: onnx.NodeProto, types: TypeMap) -> list[onnx.TypeProto | None]:
    branches = [_body(node, "then_branch"), _body(node, "else_branch")]
    if branches[0] is None or branches[1] is None:
        return []
    then_types, else_types = (infer_body(model, branch, [], types) for branch in branches if branch is not None)
    return [_merge(a, b) for a, b in zip(then_types, else_types, strict=False)]


def infer_body(
    model: onnx.ModelProto, body: onnx.GraphProto, call_types: Sequence[onnx.TypeProto | None], outer: TypeMap
) -> list[onnx.TypeProto | None]:
    """The types of ``body``'s outputs, inferred on the body alone: its inputs typed by
    ``call_types`` (None keeps the declared type) and its outer-scope reads by ``outer``."""
    inferred = infer_body_graph(model, body, call_types, outer)
    if inferred is None:
        return [None for _ in body.output]
    known = type_map(inferred)
    return [known.get(output.name) if has_shape(known.get(output.name)) else None for output in body.output]


def loop_call_types(node: onnx.NodeProto, outer: TypeMap) -> list[onnx.TypeProto | None]:
    """The types a Loop passes its body: iteration number, condition, initial carried values."""
    return [
        helper.make_tensor_type_proto(onnx.TensorProto.INT64, []),
        helper.make_tensor_type_proto(onnx.TensorProto.BOOL, []),
        *(outer.get(name) if name else None for name in node.input[2:]),
    ]


def infer_body_graph(
    model: onnx.ModelProto, body: onnx.GraphProto, call_types: Sequence[onnx.TypeProto | None], outer: TypeMap
) -> onnx.GraphProto | None:
    """``body`` inferred on its own (see ``infer_body``), with every tensor's type it could find
    in its value_info; None when inference fails."""
    graph = onnx.GraphProto()
    graph.CopyFrom(body)
    for info, call_type in zip(graph.input, call_types, strict=False):
        if call_type is not None and call_type.WhichOneof("value") is not None:
            info.type.CopyFrom(call_type)
    declared = {info.name for info in graph.input}
    for name in sorted(outer_scope_names(body) - declared):
        if name in outer:
            graph.input.append(onnx.ValueInfoProto(name=name, type=outer[name]))
    wrapper = helper.make_model(graph, opset_imports=list(model.opset_import))
    wrapper.ir_version = model.ir_version
    wrapper.functions.extend(model.functions)
    try:
        inferred = onnx.shape_inference.infer_shapes(wrapper, strict_mode=False, data_prop=True)
        if complete_control_flow_shapes(inferred):  # a Loop or If nested in the body
            inferred = onnx.shape_inference.infer_shapes(inferred, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError):
        return None
    return inferred.graph


def _merge(a: onnx.TypeProto | None, b: onnx.TypeProto | None) -> onnx.TypeProto | None:
    """The tensor type both agree on: same element type and rank; dims kept where equal."""
    if not (has_shape(a) and has_shape(b)):
        return None
    assert a is not None and b is not None
    ta, tb = a.tensor_type, b.tensor_type
    if ta.elem_type != tb.elem_type or len(ta.shape.dim) != len(tb.shape.dim):
        return None
    return _tensor_type(
        ta.elem_type, [da if da == db else None for da, db in zip(ta.shape.dim, tb.shape.dim, strict=True)]
    )


def _stacked(value: onnx.TypeProto | None, keep_dims: bool) -> onnx.TypeProto | None:
    """A scan output: the iteration axis (unknown length) before the body's scan value."""
    if not has_shape(value):
        return None
    assert value is not None
    dims = list(value.tensor_type.shape.dim) if keep_dims else [None] * len(value.tensor_type.shape.dim)
    return _tensor_type(value.tensor_type.elem_type, [None, *dims])


def _tensor_type(elem_type: int, dims: Iterable[onnx.TensorShapeProto.Dimension | None]) -> onnx.TypeProto:
    tensor_type = helper.make_tensor_type_proto(elem_type, [])
    shape = tensor_type.tensor_type.shape
    for dim in dims:
        added = shape.dim.add()
        if dim is not None:
            added.CopyFrom(dim)
    return tensor_type

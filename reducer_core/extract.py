"""Extraction: any node set of a ``GraphIndex`` becomes a valid, loadable model.

Rules (ARCHITECTURE.md §2):
- a tensor read by the set but not produced in it becomes a graph input, unless it is an
  initializer (kept, by reference: external data keeps its location/offset) or a frozen value;
- a tensor produced in the set becomes a graph output when it is an original graph output, or
  when it was read in the original graph and no node of the set reads it any more. A tensor still
  read inside the set never becomes an output because another of its readers was removed (an
  extra output changes what runtimes fuse and can hide the bug being reduced). A node that keeps
  one of its outputs alive that way (read inside, or an original output) does not get its other,
  no-longer-read outputs marked either: they stay dangling, as in Polygraphy's subgraphs. Only a
  node none of whose outputs would be marked (it was dead in the original) has all of them marked;
- opset imports, IR version (capped), metadata, model-local functions and nested bodies (which
  keep their outer-scope references, now satisfied by inputs or initializers) are preserved;
- a candidate with body edits (``Candidate.body``) has its Loop/If bodies rewritten by
  ``reducer_core.bodies``: the tensors it hoists become graph inputs after the others; an
  inlined node's body nodes take its place (their inputs and dangling outputs become the graph's);
- a candidate with data edits (``Candidate.data``) is the same model with smaller input sizes and
  its shapes inferred again (``reducer_core.data_edits``; ``DataEditError`` when its nodes cannot
  take them).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from reducer_core import bodies, data_edits
from reducer_core.candidate import Candidate
from reducer_core.errors import MissingTypeError
from reducer_core.graph import GraphIndex, node_reads


def boundary_inputs(index: GraphIndex, nodes: frozenset[int]) -> list[str]:
    """Tensors the set reads but does not produce: the original graph inputs among them in the
    original order (as Polygraphy keeps them), then the others in first-use order."""
    produced = {name for n in nodes for name in index.writes[n]}
    seen: dict[str, None] = {}
    for n in sorted(nodes):
        for name in index.reads[n]:
            if name not in produced:
                seen.setdefault(name, None)
    position = index.input_position
    return sorted(seen, key=lambda name: position.get(name, len(position)))


def boundary_outputs(index: GraphIndex, nodes: frozenset[int]) -> list[str]:
    """The candidate's graph outputs (see module docstring), in node order."""
    result: list[str] = []
    for n in sorted(nodes):
        result.extend(_node_outputs(index, nodes, index.writes[n]))
    return result


def _node_outputs(index: GraphIndex, nodes: frozenset[int], writes: tuple[str, ...]) -> list[str]:
    """Which outputs of one node of ``nodes`` become graph outputs."""
    consumers = index.consumers
    originals = [name for name in writes if index.is_graph_output(name)]
    if originals or any(not nodes.isdisjoint(consumers.get(name, ())) for name in writes):
        return originals  # the node is alive inside the candidate: mark only original outputs
    was_read = [name for name in writes if consumers.get(name)]
    return was_read or list(writes)


def _value_info(index: GraphIndex, name: str, required: bool) -> onnx.ValueInfoProto:
    tensor_type = index.types.get(name)
    info = onnx.ValueInfoProto(name=name)
    if tensor_type is not None:
        info.type.CopyFrom(tensor_type)
    elif required:
        raise MissingTypeError(
            f"Tensor '{name}' becomes a graph input but its dtype is unknown. Run without "
            "--no-shape-inference, give --model-input-shapes, or use --force-fallback-shape-inference "
            "(shapes from an onnxruntime run)."
        )
    return info


def _frozen_initializer(name: str, value: np.ndarray) -> onnx.TensorProto:
    tensor = numpy_helper.from_array(np.asarray(value), name=name)
    return tensor


def _copy_model_shell(model: onnx.ModelProto, ir_version_cap: int | None) -> onnx.ModelProto:
    """A model with everything of ``model`` except the top-level graph's contents."""
    out = onnx.ModelProto()
    out.ir_version = min(model.ir_version, ir_version_cap) if ir_version_cap else model.ir_version
    out.opset_import.extend(model.opset_import)
    out.producer_name = model.producer_name
    out.producer_version = model.producer_version
    out.domain = model.domain
    out.model_version = model.model_version
    out.doc_string = model.doc_string
    out.metadata_props.extend(model.metadata_props)
    out.functions.extend(model.functions)
    out.graph.name = model.graph.name or "reduced"
    out.graph.doc_string = model.graph.doc_string
    return out


def _extract_light(
    index: GraphIndex,
    candidate: Candidate,
    frozen_values: Mapping[str, np.ndarray] | None,
    ir_version_cap: int | None,
) -> tuple[onnx.ModelProto, list[int], list[str]]:
    """The candidate's model without nodes and value_info, its node order and its inner tensors
    (the ones that get a value_info entry)."""
    nodes = candidate.nodes
    order = sorted(nodes)
    model = _copy_model_shell(index.model, ir_version_cap)
    graph = model.graph
    primary_reads = set(index.reads[candidate.primary]) if candidate.primary is not None else None
    for name in boundary_inputs(index, nodes):
        if name in index.initializers:
            graph.initializer.append(index.initializers[name])
        elif primary_reads is not None and frozen_values and name not in primary_reads and name in frozen_values:
            graph.initializer.append(_frozen_initializer(name, frozen_values[name]))
        else:
            graph.input.append(_value_info(index, name, required=True))
    outputs = boundary_outputs(index, nodes)
    graph.output.extend(_value_info(index, name, required=False) for name in outputs)
    escaping = set(outputs)
    types, writes = index.types, index.writes
    inner = [name for n in order for name in writes[n] if name not in escaping and name in types]
    return model, order, inner


def extract(
    index: GraphIndex,
    candidate: Candidate,
    frozen_values: Mapping[str, np.ndarray] | None = None,
    ir_version_cap: int | None = None,
) -> onnx.ModelProto:
    """Build the model of ``candidate``. Costs O(nodes): external weights are referenced, not copied.

    ``frozen_values``: when the candidate has a primary node, boundary tensors that are not that
    node's inputs and have a value here become constants instead of graph inputs (Polygraphy's
    branch freezing on the input side).
    """
    if candidate.data:  # smaller input sizes on the model of the same nodes (``data_edits``)
        plain = Candidate(candidate.nodes, candidate.primary, candidate.body)
        model = extract(index, plain, frozen_values, ir_version_cap)
        return data_edits.apply(model, candidate.data, index.read_weight)
    if candidate.body:
        return _extract_edited(index, candidate, ir_version_cap)
    model, order, inner = _extract_light(index, candidate, frozen_values, ir_version_cap)
    graph = model.graph
    graph.node.extend(index.nodes[n] for n in order)
    graph.value_info.extend(_value_info(index, name, required=False) for name in inner)
    return model


def _extract_edited(index: GraphIndex, candidate: Candidate, ir_version_cap: int | None) -> onnx.ModelProto:
    edited = bodies.edit(index, candidate.nodes, candidate.body)
    if edited.inlined:
        return _extract_inlined(index, edited, ir_version_cap)
    model, _, inner = _extract_light(index, Candidate(candidate.nodes), None, ir_version_cap)
    graph = model.graph
    # what only the removed body nodes read goes too: no graph input or initializer nobody reads
    still_read = {name for node in edited.nodes for name in node_reads(node)}
    unread = {name for n in candidate.nodes for name in index.reads[n]} - still_read
    _drop_inputs(graph, unread)
    graph.node.extend(edited.nodes)
    graph.input.extend(_typed(name, tensor_type) for name, tensor_type in edited.hoisted.items())
    graph.value_info.extend(_value_info(index, name, required=False) for name in inner)
    return model


def _drop_inputs(graph: onnx.GraphProto, names: set[str]) -> None:
    """Remove the graph inputs and initializers named ``names``."""
    if not names:
        return
    inputs = [info for info in graph.input if info.name not in names]
    initializers = [tensor for tensor in graph.initializer if tensor.name not in names]
    del graph.input[:]
    graph.input.extend(inputs)
    del graph.initializer[:]
    graph.initializer.extend(initializers)


def _typed(name: str, tensor_type: onnx.TypeProto | None) -> onnx.ValueInfoProto:
    info = onnx.ValueInfoProto(name=name)
    if tensor_type is not None:
        info.type.CopyFrom(tensor_type)
    return info


def _extract_inlined(index: GraphIndex, edited: bodies.Edited, ir_version_cap: int | None) -> onnx.ModelProto:
    """A model of the nodes left in one body: what they read and nothing produces becomes a
    graph input (an initializer when it is one), what no node of them reads a graph output."""
    model = _copy_model_shell(index.model, ir_version_cap)
    graph = model.graph
    produced = {name for node in edited.nodes for name in node.output if name}
    consumed = {name for node in edited.nodes for name in node_reads(node)}
    read = dict.fromkeys(name for node in edited.nodes for name in node_reads(node) if name not in produced)
    for name in read:
        if name in index.initializers:
            graph.initializer.append(index.initializers[name])
        elif name in edited.hoisted:
            graph.input.append(_typed(name, edited.hoisted[name]))
        else:
            graph.input.append(_value_info(index, name, required=True))
    graph.node.extend(edited.nodes)
    for node in edited.nodes:
        graph.output.extend(
            _typed(name, edited.types.get(name)) for name in node.output if name and name not in consumed
        )
    return model


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


_GRAPH_NODE, _GRAPH_VALUE_INFO, _MODEL_GRAPH = 1, 13, 7


class SerializedPieces:
    """Each node (and, lazily, each tensor's value_info) of one ``GraphIndex``, serialized once as
    a ready-made GraphProto field, so writing a candidate is concatenation instead of copying and
    serializing thousands of protobuf messages per iteration."""

    def __init__(self, index: GraphIndex) -> None:
        self.index = index
        self.nodes = [_field(_GRAPH_NODE, node.SerializeToString()) for node in index.nodes]
        self._value_info: dict[str, bytes] = {}

    def value_info(self, name: str) -> bytes:
        piece = self._value_info.get(name)
        if piece is None:
            info = _value_info(self.index, name, required=False)
            piece = self._value_info[name] = _field(_GRAPH_VALUE_INFO, info.SerializeToString())
        return piece


def extract_bytes(
    pieces: SerializedPieces,
    candidate: Candidate,
    frozen_values: Mapping[str, np.ndarray] | None = None,
    ir_version_cap: int | None = None,
) -> bytes:
    """``extract(...).SerializeToString()``, parsed equal, built from pre-serialized pieces."""
    if candidate.body or candidate.data:  # rewritten bodies or shapes: no pre-serialized pieces to reuse
        edited: bytes = extract(pieces.index, candidate, frozen_values, ir_version_cap).SerializeToString()
        return edited
    model, order, inner = _extract_light(pieces.index, candidate, frozen_values, ir_version_cap)
    graph = model.graph.SerializeToString()
    body = b"".join([graph, *(pieces.nodes[n] for n in order), *map(pieces.value_info, inner)])
    model.ClearField("graph")
    shell: bytes = model.SerializeToString()
    return shell + _field(_MODEL_GRAPH, body)

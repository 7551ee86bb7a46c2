"""Weight edits of a candidate (``Candidate.data``, after its input sizes): smaller constant
tensors the min-bad model reads, applied to its extracted model by ``data_edits.apply``.

- ``"used:W"``: initializer ``W`` is read only by Gather nodes with constant indices and Slice
  nodes with constant starts/ends (steps of 1): it is sliced to the rows (along each axis) they
  read, and their indices/starts/ends are shifted to match (new initializers, so a constant shared
  with another node stays as it was). The model computes exactly what it computed before.
- ``"wdim:64=8"``: every dimension of value 64 of the model's weights and of its graph inputs
  becomes 8 (the leading 8 entries of each weight are kept): the hidden size of a layer shrinks
  with its weights. A weight here is a floating-point initializer (the indexed axis of a Gather's
  table excluded: its indices stay valid) or an integer initializer read only as Gather indices.
  Not equivalent: the check decides whether the failure survives it.

Initializers with external data are read through ``GraphIndex.read_weight`` (without it they are
left alone); a sliced one is written inline. The model's shapes
are then inferred again in strict mode and the onnx checker runs in full (``data_edits.apply``):
a candidate its nodes cannot take raises ``DataEditError`` and is never checked. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from reducer_core.errors import ReducerError

USED, WDIM = "used:", "wdim:"
_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}
_INTEGERS = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}
Reader = Callable[[onnx.TensorProto], np.ndarray] | None
"""Reads an initializer, external data included (``GraphIndex.read_weight``); None: inline ones only."""


class WeightEditError(ReducerError):
    """The weight edit does not apply to the model (``data_edits`` turns it into ``DataEditError``)."""


def used_edit(name: str) -> str:
    return f"{USED}{name}"


def dim_edit(old: int, new: int) -> str:
    return f"{WDIM}{old}={new}"


def is_weight_edit(edit: str) -> bool:
    return edit.startswith((USED, WDIM))


def parse_dims(edits: Iterable[str]) -> dict[int, int]:
    """``{original size: new size}`` of the ``wdim:`` edits among ``edits``."""
    sizes: dict[int, int] = {}
    for edit in edits:
        if edit.startswith(WDIM):
            old, _, new = edit[len(WDIM) :].partition("=")
            sizes[int(old)] = int(new)
    return sizes


def _consumers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for position, name in enumerate(node.input):
            if name:
                readers.setdefault(name, []).append((node, position))
    return readers


def _body_reads(graph: onnx.GraphProto) -> set[str]:
    """Names read inside any node's subgraph (outer-scope references)."""
    names: set[str] = set()
    for node in graph.node:
        for attr in node.attribute:
            for body in [attr.g] if attr.HasField("g") else list(attr.graphs):
                names.update(name for inner in body.node for name in inner.input)
                names.update(_body_reads(body))
    return names


def _readable(tensor: onnx.TensorProto, read: Reader) -> bool:
    return read is not None or tensor.data_location != onnx.TensorProto.EXTERNAL


def _array(tensor: onnx.TensorProto, read: Reader) -> np.ndarray:
    return read(tensor) if read is not None else numpy_helper.to_array(tensor)


def _index_values(graph: onnx.GraphProto, read: Reader) -> dict[str, np.ndarray]:
    """Values of the integer constants (initializers and Constant nodes' ``value`` tensors): the
    indices, starts, ends, axes and steps of Gather/Slice nodes."""
    values = {t.name: _array(t, read) for t in graph.initializer if t.data_type in _INTEGERS and _readable(t, read)}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type in _INTEGERS and _readable(attr.t, None):
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _attr_int(node: onnx.NodeProto, name: str, default: int) -> int:
    for attr in node.attribute:
        if attr.name == name:
            return int(attr.i)
    return default


# -- "used:": the rows a tensor's Gather/Slice readers take ----------------------------------------


def _gather_range(
    node: onnx.NodeProto, shape: tuple[int, ...], values: dict[str, np.ndarray]
) -> dict[int, tuple[int, int]] | None:
    if len(node.input) < 2 or node.input[1] not in values:
        return None
    axis = _attr_int(node, "axis", 0) % len(shape)
    indices = values[node.input[1]].astype(np.int64)
    if indices.size == 0:
        return None
    indices = np.where(indices < 0, indices + shape[axis], indices)
    if indices.min() < 0 or indices.max() >= shape[axis]:
        return None
    return {axis: (int(indices.min()), int(indices.max()) + 1)}


def _slice_arguments(
    node: onnx.NodeProto, rank: int, values: dict[str, np.ndarray]
) -> list[tuple[int, int, int]] | None:
    """``[(axis, start, end)]`` of a Slice whose inputs are constants and whose steps are 1."""
    names = list(node.input) + [""] * (5 - len(node.input))
    if any(name and name not in values for name in names[1:]) or not names[1] or not names[2]:
        return None
    starts, ends = values[names[1]].astype(np.int64), values[names[2]].astype(np.int64)
    axes = values[names[3]].astype(np.int64) if names[3] else np.arange(len(starts))
    steps = values[names[4]].astype(np.int64) if names[4] else np.ones(len(starts), np.int64)
    if not len(starts) == len(ends) == len(axes) == len(steps) or np.any(steps != 1):
        return None
    return [(int(a) % rank, int(s), int(e)) for a, s, e in zip(axes, starts, ends, strict=True)]


def _clamp(value: int, size: int) -> int:
    return min(max(value + size if value < 0 else value, 0), size)


def _slice_range(
    node: onnx.NodeProto, shape: tuple[int, ...], values: dict[str, np.ndarray]
) -> dict[int, tuple[int, int]] | None:
    arguments = _slice_arguments(node, len(shape), values)
    if arguments is None:
        return None
    ranges = {axis: (_clamp(s, shape[axis]), _clamp(e, shape[axis])) for axis, s, e in arguments}
    return None if any(lo >= hi for lo, hi in ranges.values()) else ranges


def _read_ranges(
    graph: onnx.GraphProto, tensor: onnx.TensorProto, values: dict[str, np.ndarray]
) -> dict[int, tuple[int, int]] | None:
    """Per axis, the range of ``tensor``'s entries its readers take (None: some reader takes it
    whole or is not a constant Gather/Slice)."""
    name = tensor.name
    if name in {o.name for o in graph.output} or name in _body_reads(graph):
        return None
    shape = tuple(tensor.dims)
    readers = _consumers(graph).get(name, [])
    if not shape or not readers:
        return None
    merged: dict[int, tuple[int, int]] = {}
    seen: list[dict[int, tuple[int, int]]] = []
    for node, position in readers:
        ranges = None
        if position == 0 and node.op_type == "Gather":
            ranges = _gather_range(node, shape, values)
        elif position == 0 and node.op_type == "Slice":
            ranges = _slice_range(node, shape, values)
        if ranges is None:
            return None
        seen.append(ranges)
    for axis, size in enumerate(shape):
        spans = [r.get(axis, (0, size)) for r in seen]
        merged[axis] = (min(lo for lo, _ in spans), max(hi for _, hi in spans))
    return {axis: span for axis, span in merged.items() if span != (0, shape[axis])}


def used_candidates(model: onnx.ModelProto, read: Reader = None) -> list[str]:
    """The (readable) initializers of ``model`` whose readers take only part of them."""
    graph = model.graph
    values = _index_values(graph, read)
    tensors = [t for t in graph.initializer if _readable(t, read)]
    return [t.name for t in tensors if _read_ranges(graph, t, values)]


def _unique(graph: onnx.GraphProto, base: str) -> str:
    taken = {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}
    taken |= {i.name for i in graph.input}
    name, number = base, 0
    while name in taken:
        number += 1
        name = f"{base}_{number}"
    return name


def _add_constant(graph: onnx.GraphProto, base: str, value: np.ndarray) -> str:
    name = _unique(graph, base)
    graph.initializer.append(numpy_helper.from_array(value, name))
    return name


def _apply_used(graph: onnx.GraphProto, name: str, read: Reader) -> None:
    values = _index_values(graph, read)
    tensor = next((t for t in graph.initializer if t.name == name), None)
    if tensor is None or not _readable(tensor, read):
        raise WeightEditError(f"'{name}' is not an initializer of the model whose values can be read.")
    ranges = _read_ranges(graph, tensor, values)
    if not ranges:
        raise WeightEditError(f"The readers of '{name}' take all of it.")
    array = _array(tensor, read)
    cut = array[tuple(slice(*ranges[axis]) if axis in ranges else slice(None) for axis in range(array.ndim))]
    _replace_initializer(graph, name, cut)
    for node, _ in _consumers(graph)[name]:
        if node.op_type == "Gather":
            axis = _attr_int(node, "axis", 0) % array.ndim
            indices = values[node.input[1]]
            shifted = np.where(indices < 0, indices + array.shape[axis], indices) - ranges.get(axis, (0, 0))[0]
            node.input[1] = _add_constant(graph, f"{name}.indices", shifted.astype(indices.dtype))
            continue
        arguments = _slice_arguments(node, array.ndim, values)
        assert arguments is not None
        starts = [_clamp(s, array.shape[a]) - ranges.get(a, (0, 0))[0] for a, s, _ in arguments]
        ends = [_clamp(e, array.shape[a]) - ranges.get(a, (0, 0))[0] for a, _, e in arguments]
        dtype = values[node.input[1]].dtype
        node.input[1] = _add_constant(graph, f"{name}.starts", np.array(starts, dtype))
        node.input[2] = _add_constant(graph, f"{name}.ends", np.array(ends, dtype))
    _drop_unread(graph)


def _drop_unread(graph: onnx.GraphProto) -> None:
    """Remove the initializers nothing reads any more (the indices and bounds replaced)."""
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    read |= _body_reads(graph)
    kept = [t for t in graph.initializer if t.name in read]
    if len(kept) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept)


def _replace_initializer(graph: onnx.GraphProto, name: str, value: np.ndarray) -> None:
    for tensor in graph.initializer:
        if tensor.name == name:
            tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(value), name))
            return


# -- "wdim:": a size shrunk across the weights and the graph inputs -----------------------------------


def _weight_axes(graph: onnx.GraphProto, read: Reader) -> dict[str, list[int]]:
    """The inline initializers that count as weights, and the axes of each that may shrink."""
    readers = _consumers(graph)
    axes: dict[str, list[int]] = {}
    for tensor in graph.initializer:
        if not _readable(tensor, read) or not tensor.dims:
            continue
        reads = readers.get(tensor.name, [])
        if tensor.data_type in _INTEGERS:
            if reads and all(node.op_type == "Gather" and position == 1 for node, position in reads):
                axes[tensor.name] = list(range(len(tensor.dims)))
            continue
        if tensor.data_type not in _FLOATS:
            continue
        indexed = {
            _attr_int(node, "axis", 0) % len(tensor.dims) for node, p in reads if node.op_type == "Gather" and p == 0
        }
        axes[tensor.name] = [a for a in range(len(tensor.dims)) if a not in indexed]
    return axes


def weight_sizes(model: onnx.ModelProto, read: Reader = None) -> list[int]:
    """The sizes above 1 of the dimensions ``wdim:`` edits may shrink."""
    dims = {t.name: list(t.dims) for t in model.graph.initializer}
    axes = _weight_axes(model.graph, read)
    return sorted({dims[name][a] for name, kept in axes.items() for a in kept if dims[name][a] > 1})


def _apply_dims(graph: onnx.GraphProto, sizes: dict[int, int], read: Reader) -> None:
    for name, axes in _weight_axes(graph, read).items():
        tensor = next(t for t in graph.initializer if t.name == name)
        if not any(tensor.dims[a] in sizes for a in axes):
            continue
        array = _array(tensor, read)
        cut = tuple(
            slice(0, sizes[array.shape[a]]) if a in axes and array.shape[a] in sizes else slice(None)
            for a in range(array.ndim)
        )
        _replace_initializer(graph, name, array[cut])
    resize_inputs(graph, sizes)


def resize_inputs(graph: onnx.GraphProto, sizes: dict[int, int]) -> None:
    """Each graph input's (not a weight's) dimension of a size in ``sizes`` takes its new size."""
    weights = {t.name for t in graph.initializer}
    for inp in graph.input:
        if inp.name in weights or not inp.type.HasField("tensor_type"):
            continue
        for dim in inp.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value in sizes:
                dim.dim_value = sizes[dim.dim_value]


def apply_in_place(graph: onnx.GraphProto, edits: Iterable[str], read: Reader = None) -> None:
    """Apply the weight edits among ``edits`` to ``graph`` (``wdim:`` first, then ``used:``)."""
    edits = sorted(e for e in edits if is_weight_edit(e))
    sizes = parse_dims(edits)
    if sizes:
        _apply_dims(graph, sizes, read)
    for edit in edits:
        if edit.startswith(USED):
            _apply_used(graph, edit[len(USED) :], read)


def initializer_bytes(model: onnx.ModelProto) -> int:
    """The bytes of the model's constant tensors (initializers, external ones included, and
    Constant nodes' values), at their element size."""
    tensors = list(model.graph.initializer)
    tensors += [a.t for n in model.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
    total = 0
    for tensor in tensors:
        count = int(np.prod(tensor.dims)) if tensor.dims else 1
        total += count * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    return total


def describe(edits: Iterable[str]) -> str:
    """``"64 -> 8; read part of pos_table"``: what the weight edits shrink."""
    edits = list(edits)
    sizes = ", ".join(f"{old} -> {new}" for old, new in sorted(parse_dims(edits).items(), reverse=True))
    used = ", ".join(sorted(e[len(USED) :] for e in edits if e.startswith(USED)))
    return "; ".join(part for part in (sizes, f"read part of {used}" if used else "") if part)

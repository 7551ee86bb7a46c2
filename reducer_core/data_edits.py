"""Data edits of a candidate (``Candidate.data``): smaller sizes for the dimensions of its graph
inputs, applied to its extracted model (``reducer_core.data_reduction`` searches them).

An edit ``"dim:256=17"`` sets every dimension of value 256 of the model's graph inputs (not its
initializers) to 17: the inputs that share a size (a sequence length read by ``input_ids`` and
``attention_mask``) shrink together. The model's inner and output shapes are inferred again, in
strict mode: a size its nodes cannot take (a MatMul's contraction dimension against a weight, a
broadcast against a bias, a Reshape to a fixed shape), or a model that then fails
``onnx.checker.check_model(full_check=True)`` (a Loop whose outputs lose their shapes), raises
``DataEditError``, so such a candidate is never written, let alone checked. Pure: ModelProto in,
ModelProto out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import onnx

from reducer_core import weight_edits
from reducer_core.errors import ReducerError

PREFIX = "dim:"


class DataEditError(ReducerError):
    """The model's nodes cannot take the smaller input sizes."""


def dim_edit(old: int, new: int) -> str:
    return f"{PREFIX}{old}={new}"


def parse(edits: Iterable[str]) -> dict[int, int]:
    """``{original size: new size}`` of ``edits`` (weight edits, ``reducer_core.weight_edits``, aside)."""
    sizes: dict[int, int] = {}
    for edit in edits:
        if weight_edits.is_weight_edit(edit):
            continue
        if not edit.startswith(PREFIX):
            raise ValueError(f"Unknown data edit '{edit}'.")
        old, _, new = edit[len(PREFIX) :].partition("=")
        sizes[int(old)] = int(new)
    return sizes


def input_dims(model: onnx.ModelProto) -> dict[str, list[int | str]]:
    """The graph inputs (initializers excluded) and their dimensions (a symbolic one as its name)."""
    weights = {t.name for t in model.graph.initializer}
    dims: dict[str, list[int | str]] = {}
    for inp in model.graph.input:
        if inp.name in weights or not inp.type.HasField("tensor_type"):
            continue
        shape = inp.type.tensor_type.shape
        dims[inp.name] = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in shape.dim]
    return dims


def elements(dims: Mapping[str, list[int | str]]) -> int:
    """How many values the inputs hold (a symbolic dimension counts as 1, as checks feed it)."""
    total = 0
    for shape in dims.values():
        count = 1
        for d in shape:
            count *= d if isinstance(d, int) and d > 0 else 1
        total += count
    return total


def apply(model: onnx.ModelProto, edits: Iterable[str], read: weight_edits.Reader = None) -> onnx.ModelProto:
    """``model`` with its graph inputs' sizes changed by ``edits`` (then its weights, by the weight
    edits among them: ``reducer_core.weight_edits``) and its shapes inferred again."""
    edits = sorted(edits)
    sizes = parse(edits)
    changes = [edit for edit in edits if weight_edits.is_weight_edit(edit)]
    if not sizes and not changes:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    weight_edits.resize_inputs(graph, sizes)
    try:
        weight_edits.apply_in_place(graph, changes, read)
    except weight_edits.WeightEditError as error:
        raise DataEditError(str(error)) from None
    del graph.value_info[:]
    for output in graph.output:
        if output.type.HasField("tensor_type"):
            output.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(out, check_type=True, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError) as error:
        raise DataEditError(f"The model's nodes cannot take the input sizes {sorted(edits)}: {error}") from None
    _check_reshapes(inferred)
    try:  # every data candidate passes the full checker (a Loop's outputs that lose their shapes do not)
        onnx.checker.check_model(_checkable(inferred), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        raise DataEditError(f"The model does not pass the checker with the data edits {edits}: {error}") from None
    return inferred


def _checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` for the checker: its external initializers (original weights, unchanged, their
    files checked when the model was loaded) become typed graph inputs, since the checker looks for
    their files relative to this process's working directory."""
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [t for t in out.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    listed = {i.name for i in out.graph.input}
    for tensor in external:
        if tensor.name not in listed:
            out.graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    return out


def _static_size(tensor_type: onnx.TypeProto) -> int | None:
    if not tensor_type.HasField("tensor_type") or not tensor_type.tensor_type.HasField("shape"):
        return None
    size = 1
    for dim in tensor_type.tensor_type.shape.dim:
        if not dim.HasField("dim_value"):
            return None
        size *= dim.dim_value
    return size


def _check_reshapes(model: onnx.ModelProto) -> None:
    """Shape inference takes a Reshape to a fixed shape of another element count: refused here."""
    graph = model.graph
    types = {v.name: v.type for v in [*graph.input, *graph.value_info, *graph.output]}
    for node in graph.node:
        if node.op_type != "Reshape" or not node.input or not node.output:
            continue
        before, after = types.get(node.input[0]), types.get(node.output[0])
        sizes = (_static_size(before) if before else None, _static_size(after) if after else None)
        if None not in sizes and sizes[0] != sizes[1]:
            raise DataEditError(f"Reshape '{node.name}' has a fixed target shape: its input cannot shrink.")


def describe(edits: Iterable[str]) -> str:
    """``"256 -> 17, 8 -> 1"``: what the edits shrink, largest first."""
    return ", ".join(f"{old} -> {new}" for old, new in sorted(parse(edits).items(), reverse=True))

"""Mixed-precision models as they are deployed, and fp16 storage made real on a CPU.

``to_mixed(model, keep_fp32)`` converts an fp32 model for real: fp16 weights and activations, the
named nodes (and nodes that cannot run in fp16) computing in fp32, explicit ``Cast`` nodes only
where a tensor crosses between the two, graph inputs and outputs typed as asked (fp32 by
default). A tensor written by an fp32 node and read by fp32 nodes stays fp32, however many
readers it has. Which slots of a node follow its precision comes from the op's schema: a slot
whose type constraint admits float16 converts, a slot fixed to ``tensor(float)`` (Resize's
``scales``, LayerNormalization's ``Mean``) keeps fp32, integer slots (shapes, indices) are left
alone. Ops without a standard schema, nodes with subgraphs and nodes whose output type an
attribute sets (other than Cast and ConstantOfShape) stay fp32. The model names its fp32 nodes
in its metadata (``MIXED_KEY``): its precision is what the file says.

``storage_real(mixed)`` is the mixed model as onnxruntime's CPU provider must run it to show what
a GPU shows: that provider has almost no fp16 kernels, computes fp16 nodes in fp32 and drops
Cast pairs, which hides overflow. Here every fp16 tensor becomes an fp32 tensor rounded through
fp16 (Cast(fp16) -> Cast(fp32) after its writer), to be run with graph optimisations off: an
overflow is inf as on a GPU; each fp16 node computes from fp16 values and stores fp16 values.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MIXED_KEY = "onnx_reducer.mixed_precision"
FP16_MAX = 65504.0
FLOAT, HALF = TensorProto.FLOAT, TensorProto.FLOAT16
_TYPE_NAME: dict[int, str] = {FLOAT: "fp32", HALF: "fp16"}
# Ops whose output type an attribute sets: they keep fp32 (Cast, ConstantOfShape, Constant are handled).
_TYPED_BY_ATTRIBUTE = frozenset(
    {"EyeLike", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


@dataclass(frozen=True)
class MixedModel:
    """A converted model and its answer per node and per tensor: ``fp32_nodes`` compute in fp32
    (``kept``: the ones asked for; the others cannot run in fp16), ``fp32_tensors``: the float
    tensors nodes write that are stored fp32, ``fp16_tensors``: how many are stored fp16,
    ``casts``: the Cast nodes added at the boundaries (``cast_nodes``: their names), ``stored``:
    the original tensor each name in the model holds (a tensor stored in the other type, or cast
    for a reader, has its own name) and the type it is stored in."""

    model: onnx.ModelProto
    kept: tuple[str, ...]
    fp32_nodes: tuple[str, ...]
    fp32_tensors: tuple[str, ...]
    fp16_tensors: int
    casts: int
    cast_nodes: tuple[str, ...] = ()
    stored: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    def fp16_names(self) -> dict[str, str]:
        """Every float tensor the model stores in fp16, by its name in the model: the original tensor it holds."""
        return {name: source for name, (source, kind) in self.stored.items() if kind == HALF}

    def to_json(self) -> dict[str, object]:
        return {
            "keep_fp32": list(self.kept),
            "fp32_nodes": list(self.fp32_nodes),
            "fp32_tensors": list(self.fp32_tensors),
            "fp16_tensors": self.fp16_tensors,
            "casts": self.casts,
        }


def is_mixed(model: onnx.ModelProto) -> bool:
    """Whether ``model`` is typed already (written by ``to_mixed``, or holding fp16 weights): its
    precision is what the file says, not something to convert."""
    if any(entry.key == MIXED_KEY for entry in model.metadata_props):
        return True
    return any(t.data_type == HALF for t in model.graph.initializer)


def opset_of(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)


def elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Every tensor's element type as far as the model says (value_info, inputs, outputs,
    initializers, Constant nodes), completed by ONNX type inference where it can."""
    types: dict[str, int] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - the model's own annotations then
        inferred = model
    for graph in (inferred.graph, model.graph):
        for info in [*graph.value_info, *graph.input, *graph.output]:
            if info.type.tensor_type.elem_type:
                types.setdefault(info.name, info.type.tensor_type.elem_type)
        for tensor in graph.initializer:
            types.setdefault(tensor.name, tensor.data_type)
        for node in graph.node:
            if node.op_type == "Constant" and node.output:
                constant_type = _constant_type(node)
                if constant_type:
                    types.setdefault(node.output[0], constant_type)
    return types


def _constant_type(node: onnx.NodeProto) -> int:
    for attr in node.attribute:
        if attr.name == "value":
            return int(attr.t.data_type)
        if attr.name in ("value_float", "value_floats"):
            return FLOAT
        if attr.name in ("value_int", "value_ints"):
            return TensorProto.INT64
    return 0


@dataclass(frozen=True)
class _Slots:
    """Which input and output positions follow the node's precision (None: the node stays fp32)."""

    inputs: tuple[bool, ...]
    outputs: tuple[bool, ...]
    free: tuple[bool, ...] = ()  # inputs of any type that no other slot's type follows: read as stored


def _formal(params: list[onnx.defs.OpSchema.FormalParameter], count: int) -> list[str]:
    if not params:
        return [""] * count
    names = [p.type_str for p in params]
    last = params[-1]
    variadic = last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    return [names[i] if i < len(names) else (last.type_str if variadic else "") for i in range(count)]


def _slots(node: onnx.NodeProto, opset: int) -> _Slots | None:
    if node.domain not in ("", "ai.onnx") or node.op_type in _TYPED_BY_ATTRIBUTE:
        return None
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    if node.op_type == "Cast":
        to = next((a.i for a in node.attribute if a.name == "to"), 0)
        return _Slots((False,) * len(node.input), (to == FLOAT,) * len(node.output), (True,) * len(node.input))
    if node.op_type == "ConstantOfShape":
        return _Slots((False,) * len(node.input), (True,) * len(node.output))
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return None
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}

    def follows(type_str: str) -> bool:
        types = allowed.get(type_str, {type_str})
        return "tensor(float16)" in types and "tensor(float)" in types

    ins = _formal(list(schema.inputs), len(node.input))
    outs = _formal(list(schema.outputs), len(node.output))
    bound = {t for t in ins if follows(t)}
    for t in outs:
        if follows(t) and t in allowed and t not in bound:
            return None  # an output type no input decides (set by an attribute): leave the node fp32
    free = tuple(follows(t) and t in allowed and ins.count(t) == 1 and t not in outs for t in ins)
    return _Slots(tuple(follows(t) for t in ins), tuple(follows(t) for t in outs), free)


def _subgraph_reads(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs read from the enclosing scope (a superset: every name they read)."""
    names: set[str] = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for graph in graphs:
            for inner in graph.node:
                names.update(i for i in inner.input if i)
                names |= _subgraph_reads(inner)
    return names


def _half(value: np.ndarray) -> np.ndarray:
    """fp32 weights stored in fp16 (saturated at fp16's largest value, as converters store them)."""
    half: np.ndarray = np.clip(value, -FP16_MAX, FP16_MAX).astype(np.float16)
    return half


def _half_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    return numpy_helper.from_array(_half(numpy_helper.to_array(tensor)), tensor.name)


class _Converter:
    def __init__(
        self, model: onnx.ModelProto, keep: frozenset[str], io_type: int, types: Mapping[str, int] | None
    ) -> None:
        self.model = model
        self.graph = model.graph
        self.keep = keep
        self.io_type = io_type
        self.types = dict(types) if types is not None else elem_types(model)
        opset = opset_of(model)
        self.slots = [None if n.name in keep else _slots(n, opset) for n in self.graph.node]
        self.nodes_out: list[onnx.NodeProto] = []
        self.versions: dict[tuple[str, int], str] = {}  # (tensor, type) -> the name holding it in that type
        self.home: dict[str, int] = {}
        self.casts = 0
        self.cast_names: list[str] = []
        self.emitted: list[tuple[int, str, str, list[str]]] = []  # (index, name, op, outputs) of each node

    def is_float(self, name: str) -> bool:
        return self.types.get(name) == FLOAT

    def wanted(self, index: int, node: onnx.NodeProto) -> list[int | None]:
        """The type each input slot of node ``index`` reads a float tensor in (None: not a float tensor)."""
        slots = self.slots[index]
        wanted: list[int | None] = []
        for i, name in enumerate(node.input):
            if not name or not self.is_float(name) or (slots is not None and slots.free and slots.free[i]):
                wanted.append(None)  # not a float tensor, or a slot of any type: read as stored
            else:
                wanted.append(HALF if slots is not None and slots.inputs[i] else FLOAT)
        return wanted

    def convert(self) -> MixedModel:
        graph = self.graph
        outputs = {o.name for o in graph.output if self.is_float(o.name)}
        pinned: dict[str, int] = dict.fromkeys(outputs, self.io_type)
        for node in graph.node:
            for name in _subgraph_reads(node):
                if self.is_float(name):
                    pinned.setdefault(name, FLOAT)
        readers: dict[str, set[int]] = {}
        for index, node in enumerate(graph.node):
            for name, want in zip(node.input, self.wanted(index, node), strict=True):
                if want is not None:
                    readers.setdefault(name, set()).add(want)
        self._homes(readers, pinned)
        initializers = {t.name for t in graph.initializer}
        inputs = {i.name for i in graph.input}
        for name, kind in pinned.items():
            if name in initializers or name in inputs:
                continue
            home = self.home.get(name, FLOAT)
            self.versions[(name, home)] = name if home == kind else f"{name}__{_TYPE_NAME[home]}"
        for name in [*initializers, *inputs]:
            if name in self.home:
                self.versions[(name, self.home[name])] = name
        for tensor in graph.initializer:
            if self.home.get(tensor.name) == HALF:
                tensor.CopyFrom(_half_tensor(tensor))
        for info in graph.input:
            if info.name in self.home and info.name not in initializers:
                info.type.tensor_type.elem_type = self.home[info.name]
        for index, node in enumerate(graph.node):
            self._emit(index, node, pinned)
        del graph.node[:]
        graph.node.extend(self.nodes_out)
        for info in graph.output:
            if info.name in outputs:
                info.type.tensor_type.elem_type = self.io_type
        self._value_info()
        return self._answer()

    def _homes(self, readers: dict[str, set[int]], pinned: dict[str, int]) -> None:
        graph = self.graph
        for info in graph.input:
            if self.is_float(info.name):
                self.home[info.name] = self.io_type
        for tensor in graph.initializer:
            if tensor.data_type == FLOAT:
                wants = readers.get(tensor.name, set())
                keep32 = FLOAT in wants or pinned.get(tensor.name) == FLOAT or not wants
                self.home[tensor.name] = FLOAT if keep32 else HALF
        for index, node in enumerate(graph.node):
            slots = self.slots[index]
            for i, name in enumerate(node.output):
                if not name or not self.is_float(name):
                    continue
                if node.op_type == "Constant":
                    wants = readers.get(name, set())
                    fp32 = node.name in self.keep or FLOAT in wants or pinned.get(name) == FLOAT or not wants
                    self.home[name] = FLOAT if fp32 else HALF
                else:
                    self.home[name] = HALF if slots is not None and slots.outputs[i] else FLOAT

    def _version(self, name: str, kind: int) -> str:
        """The name holding ``name`` in type ``kind``, a Cast added (once) when it is stored otherwise."""
        if (name, kind) in self.versions:
            return self.versions[(name, kind)]
        home = self.home.get(name, FLOAT)
        source = self.versions.get((name, home), name)
        cast = f"{name}__to_{_TYPE_NAME[kind]}"
        self._add_cast(source, cast, kind)
        self.versions[(name, kind)] = cast
        return cast

    def _emit(self, index: int, node: onnx.NodeProto, pinned: dict[str, int]) -> None:
        for i, (name, want) in enumerate(zip(list(node.input), self.wanted(index, node), strict=True)):
            if want is not None:
                node.input[i] = self._version(name, want)
        if self.slots[index] is not None:
            self._retype_attributes(node)
        if node.op_type == "Constant" and node.output and self.home.get(node.output[0]) == HALF:
            self._half_constant(node)
        originals = list(node.output)
        self.emitted.append((index, node.name, node.op_type, originals))
        for i, name in enumerate(originals):
            if name in self.home:
                node.output[i] = self.versions.setdefault((name, self.home[name]), name)
        self.nodes_out.append(node)
        for name in originals:
            kind = pinned.get(name)
            if kind is None or name not in self.home or (name, kind) in self.versions:
                continue
            source = self.versions[(name, self.home[name])]
            self._add_cast(source, name, kind)
            self.versions[(name, kind)] = name

    def _add_cast(self, source: str, target: str, kind: int) -> None:
        cast = helper.make_node("Cast", [source], [target], name=f"{target}_cast", to=kind)
        self.nodes_out.append(cast)
        self.cast_names.append(cast.name)
        self.casts += 1

    def _retype_attributes(self, node: onnx.NodeProto) -> None:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == FLOAT:
                attr.i = HALF
            if node.op_type == "ConstantOfShape" and attr.name == "value" and attr.t.data_type == FLOAT:
                attr.t.CopyFrom(_half_tensor(attr.t))
        no_value = node.op_type == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute)
        if no_value and node.output and self.types.get(node.output[0]) == FLOAT:
            node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(np.zeros(1, np.float16))))

    def _half_constant(self, node: onnx.NodeProto) -> None:
        value = None
        for attr in node.attribute:
            if attr.name == "value":
                value = numpy_helper.to_array(attr.t)
            elif attr.name == "value_float":
                value = np.array(attr.f, np.float32)
            elif attr.name == "value_floats":
                value = np.array(list(attr.floats), np.float32)
        if value is None:
            return
        del node.attribute[:]
        node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(_half(value))))

    def _value_info(self) -> None:
        graph = self.graph
        shapes = {v.name: v for v in [*graph.value_info, *graph.input, *graph.output]}
        io = {v.name for v in [*graph.input, *graph.output]}
        del graph.value_info[:]
        for (name, kind), version in sorted(self.versions.items()):
            if version in io or name not in shapes:
                continue
            info = onnx.ValueInfoProto()
            info.CopyFrom(shapes[name])
            info.name = version
            info.type.tensor_type.elem_type = kind
            graph.value_info.append(info)

    def _answer(self) -> MixedModel:
        fp32_tensors: list[str] = []
        fp32_nodes: list[str] = []
        fp16 = 0
        for index, name, op_type, outputs in self.emitted:
            homes = [self.home[o] for o in outputs if o in self.home]
            fp32_tensors += [o for o in outputs if self.home.get(o) == FLOAT]
            fp16 += sum(1 for kind in homes if kind == HALF)
            if FLOAT in homes and op_type != "Constant" and (name in self.keep or self.slots[index] is None):
                fp32_nodes.append(name)
        stored = {version: (name, kind) for (name, kind), version in self.versions.items()}
        return MixedModel(
            self.model,
            tuple(sorted(self.keep)),
            tuple(fp32_nodes),
            tuple(fp32_tensors),
            fp16,
            self.casts,
            tuple(self.cast_names),
            stored,
        )


def to_mixed(
    model: onnx.ModelProto,
    keep_fp32: Collection[str] = (),
    io: str = "fp32",
    types: Mapping[str, int] | None = None,
) -> MixedModel:
    """The model converted to fp16 but for the nodes named in ``keep_fp32`` (module docstring);
    ``io``: the type of float graph inputs and outputs, ``fp32`` (as the original) or ``fp16``.
    ``model`` must hold its weights (not modified); ``types``: ``elem_types(model)`` when known
    (a search converts the same model many times)."""
    converted = onnx.ModelProto()
    converted.CopyFrom(model)
    converter = _Converter(converted, frozenset(keep_fp32), HALF if io == "fp16" else FLOAT, types)
    mixed = converter.convert()
    kept = [e for e in converted.metadata_props if e.key != MIXED_KEY]
    del converted.metadata_props[:]
    converted.metadata_props.extend(kept)
    summary = {"keep_fp32": list(mixed.kept), "io": io}
    converted.metadata_props.append(onnx.StringStringEntryProto(key=MIXED_KEY, value=json.dumps(summary)))
    return mixed


# --- fp16 storage made real ---------------------------------------------------------------------


def storage_real(model: onnx.ModelProto) -> onnx.ModelProto:
    """The typed model as an fp32 model whose every fp16 tensor is rounded through fp16 where it
    is written (module docstring). Run it with onnxruntime's graph optimisations off."""
    types = elem_types(model)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    for tensor in graph.initializer:
        if tensor.data_type == HALF:
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name))
    nodes: list[onnx.NodeProto] = []
    for info in graph.input:
        if info.type.tensor_type.elem_type == HALF:
            info.type.tensor_type.elem_type = FLOAT
            nodes += _round_trip_of(info.name, graph)
    for node in graph.node:
        _fp32_attributes(node)
        extra: list[onnx.NodeProto] = []
        for i, name in enumerate(node.output):
            if name and types.get(name) == HALF:
                node.output[i] = f"{name}__exact"
                extra += _round_trip(node.output[i], name)
        nodes += [node, *extra]
    del graph.node[:]
    graph.node.extend(nodes)
    for info in graph.output:
        if info.type.tensor_type.elem_type == HALF:
            info.type.tensor_type.elem_type = FLOAT
    del graph.value_info[:]
    return result


def _round_trip_of(name: str, graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """A graph input read rounded: its readers read the rounded copy."""
    rounded = f"{name}__rounded"
    for node in graph.node:
        node.input[:] = [rounded if i == name else i for i in node.input]
    for info in graph.output:
        if info.name == name:
            info.name = rounded
    return _round_trip(name, rounded)


def _round_trip(source: str, target: str) -> list[onnx.NodeProto]:
    half = f"{target}__fp16"
    return [
        helper.make_node("Cast", [source], [half], name=f"{half}_store", to=HALF),
        helper.make_node("Cast", [half], [target], name=f"{target}_load", to=FLOAT),
    ]


def _fp32_attributes(node: onnx.NodeProto) -> None:
    """fp16 constants and casts to fp16 compute in fp32 (their outputs are rounded after them)."""
    for attr in node.attribute:
        casts_to_half = attr.name == "to" and node.op_type == "Cast"
        if (casts_to_half or attr.name == "dtype") and attr.i == HALF:
            attr.i = FLOAT
        elif attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == HALF:
            attr.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float32), attr.t.name))


def float_tensor_ranges(values: Iterable[tuple[str, np.ndarray]]) -> dict[str, float]:
    """The largest finite magnitude of each float tensor (inf when it holds a non-finite value)."""
    ranges: dict[str, float] = {}
    for name, value in values:
        array = np.asarray(value)
        if not np.issubdtype(array.dtype, np.floating) or array.size == 0:
            continue
        finite = np.isfinite(array)
        peak = float(np.abs(array[finite]).max(initial=0.0)) if finite.any() else 0.0
        ranges[name] = peak if finite.all() else float("inf")
    return ranges

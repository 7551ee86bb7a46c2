"""onnxruntime targets: any installed execution provider, a graph optimisation level, and fp16
(the model converted by onnxconverter-common with inputs and outputs kept fp32; the nodes the
model names in ``checks.mixed_precision`` stay fp32). A model typed already (``checks.fp16_model``:
a precision candidate, a mixed-precision model) runs as its file says; on the CPU provider with
every fp16 tensor rounded through fp16 (``storage_real``), so overflow shows as on a GPU."""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping
from pathlib import Path

import numpy as np
import onnx
from onnxconverter_common import float16

from checks.fp16_model import is_mixed, storage_real
from checks.fp16_warnings import summarised_fp16_warnings
from checks.mixed_precision import keep_fp32_of
from checks.runtimes.base import RuntimeUnavailableError
from checks.spec import RuntimeSpec

PROTO_LIMIT = 1_800_000_000


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def fp16_storage(model: onnx.ModelProto, keep_fp32: Collection[str] = ()) -> onnx.ModelProto:
    """fp16 as onnxruntime's CPU provider can show it. The CPU provider has almost no fp16
    kernels: it runs a converted graph in fp32 with "precision-free" casts, which hides overflow
    and rounding of intermediate tensors. So every float tensor (inputs, weights and each node's
    output) is stored in fp16 explicitly: weights are converted by onnxconverter-common's
    ``convert_np_to_float16`` (its clamping) and every other tensor goes through a
    Cast(fp16) -> Cast(fp32) pair, which onnxruntime keeps. Inputs and outputs stay fp32.

    The nodes named in ``keep_fp32`` stay fp32, as in onnxconverter-common's ``node_block_list``:
    their outputs and the weights they read are not rounded, and an fp16 node reading one of
    their outputs reads it rounded (the Cast to fp16 the conversion inserts there)."""
    blocked = frozenset(keep_fp32)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    types = _float_tensors(result)
    rounded_for_fp16 = _round_initializers(graph, blocked)  # tensor -> the rounded copy fp16 nodes read
    nodes: list[onnx.NodeProto] = []
    for inp in graph.input:
        if inp.name in types:
            rounded_for_fp16[inp.name] = f"{inp.name}__fp16_storage"
            nodes += _round_trip(inp.name, rounded_for_fp16[inp.name])
    for node in graph.node:
        in_fp16 = node.name not in blocked
        if in_fp16:
            for i, name in enumerate(node.input):
                node.input[i] = rounded_for_fp16.get(name, name)
        extra: list[onnx.NodeProto] = []
        for i, name in enumerate(node.output):
            if name not in types or node.op_type == "Cast":
                continue
            if in_fp16:
                node.output[i] = f"{name}__fp32"
                extra += _round_trip(node.output[i], name)
            else:
                rounded_for_fp16[name] = f"{name}__fp16_in"
                extra += _round_trip(name, rounded_for_fp16[name])
        nodes += [node, *extra]
    del graph.node[:]
    graph.node.extend(nodes)
    return result


def _round_initializers(graph: onnx.GraphProto, blocked: frozenset[str]) -> dict[str, str]:
    """Round float weights to fp16 in place; a weight an fp32 node reads stays as it is, and the
    fp16 nodes reading it get a rounded copy. Returns {weight: its rounded copy's name}."""
    fp32_reads = {name for node in graph.node if node.name in blocked for name in node.input}
    fp16_reads = {name for node in graph.node if node.name not in blocked for name in node.input}
    copies: dict[str, str] = {}
    for tensor in list(graph.initializer):
        if tensor.data_type != onnx.TensorProto.FLOAT:
            continue
        value = onnx.numpy_helper.to_array(tensor)
        rounded = float16.convert_np_to_float16(np.atleast_1d(value)).astype(np.float32).reshape(value.shape)
        if tensor.name not in fp32_reads:
            tensor.CopyFrom(onnx.numpy_helper.from_array(rounded, tensor.name))
        elif tensor.name in fp16_reads:
            copies[tensor.name] = f"{tensor.name}__fp16_storage"
            graph.initializer.append(onnx.numpy_helper.from_array(rounded, copies[tensor.name]))
    return copies


def _round_trip(source: str, target: str) -> list[onnx.NodeProto]:
    half = f"{target}__fp16"
    return [
        onnx.helper.make_node("Cast", [source], [half], to=onnx.TensorProto.FLOAT16),
        onnx.helper.make_node("Cast", [half], [target], to=onnx.TensorProto.FLOAT),
    ]


def _float_tensors(model: onnx.ModelProto) -> set[str]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - without types only typed tensors are rounded
        inferred = model
    graph = inferred.graph
    infos = [*graph.input, *graph.value_info, *graph.output]
    initializers = {t.name for t in graph.initializer}
    return {
        v.name for v in infos if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT and v.name not in initializers
    }


def to_fp16(model: onnx.ModelProto, keep_fp32: Collection[str] = ()) -> onnx.ModelProto:
    """fp32 -> fp16 with inputs/outputs kept fp32 (Cast nodes at the edges); the nodes named in
    ``keep_fp32`` stay fp32 (Cast nodes around them)."""
    converted: onnx.ModelProto = float16.convert_float_to_float16(
        model,
        keep_io_types=True,
        disable_shape_infer=model.ByteSize() > PROTO_LIMIT,
        node_block_list=sorted(keep_fp32) or None,
    )
    if keep_fp32:
        _restore_fp32_outputs(converted, {o.name for o in model.graph.output if _is_float(o)})
    return converted


def _is_float(value: onnx.ValueInfoProto) -> bool:
    return value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def _restore_fp32_outputs(model: onnx.ModelProto, float_outputs: set[str]) -> None:
    """onnxconverter-common (1.16) turns a graph output that a kept-fp32 node computes into fp16
    (a Cast to fp16 writes it), despite ``keep_io_types``: an overflow there becomes inf. Such an
    output is computed in fp32 again (an Identity of the Cast's input); nodes inside that read it
    keep reading the fp16 copy under another name (the Cast goes when none does)."""
    graph = model.graph
    producers = {name: node for node in graph.node for name in node.output}
    for output in graph.output:
        cast = producers.get(output.name)
        if output.name not in float_outputs or _is_float(output) or cast is None or cast.op_type != "Cast":
            continue
        readers = [node for node in graph.node if output.name in node.input]
        if readers:
            half = f"{output.name}__fp16"
            cast.output[0] = half
            for node in readers:
                node.input[:] = [half if name == output.name else name for name in node.input]
        else:
            graph.node.remove(cast)
        graph.node.append(onnx.helper.make_node("Identity", [cast.input[0]], [output.name], name=f"{output.name}_fp32"))
        output.type.tensor_type.elem_type = onnx.TensorProto.FLOAT


def session_source(model: onnx.ModelProto, workdir: Path, stem: str) -> str | bytes:
    """Bytes for small models; a file with external data beside it for models near 2 GB."""
    if model.ByteSize() < PROTO_LIMIT:
        data: bytes = model.SerializeToString()
        return data
    path = workdir / f"{stem}.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location=f"{stem}.data")
    return path.as_posix()


class OrtRunner:
    """A session for ``spec``. ``optimized_model``: where onnxruntime saves the graph it optimized
    (``optimized_model_filepath``); ``log_severity``: the session's log level (0: verbose, which
    names every graph transformer applied and whether it changed the graph: ``checks.ort_passes``)."""

    def __init__(
        self,
        spec: RuntimeSpec,
        model: onnx.ModelProto,
        workdir: Path,
        optimized_model: Path | None = None,
        log_severity: int = 3,
    ) -> None:
        import onnxruntime as ort  # noqa: PLC0415 - onnxruntime loads only in the check's child process that runs the model

        provider = spec.provider or "CPUExecutionProvider"
        if provider not in ort.get_available_providers():
            raise RuntimeUnavailableError(
                f"onnxruntime execution provider {provider} is not installed here "
                f"(available: {', '.join(ort.get_available_providers())})"
            )
        optimization = spec.optimization
        if spec.precision == "fp16" and is_mixed(model):
            # typed already (a precision candidate, a mixed model re-checked): run what the file says
            if provider == "CPUExecutionProvider":
                model, optimization = storage_real(model), "none"  # no pass may drop the rounding casts
        elif spec.precision == "fp16":
            keep = keep_fp32_of(model)
            with summarised_fp16_warnings(_to_stderr):
                model = fp16_storage(model, keep) if provider == "CPUExecutionProvider" else to_fp16(model, keep)
        options = ort.SessionOptions()
        options.graph_optimization_level = {
            "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[optimization]
        options.log_severity_level = log_severity
        options.intra_op_num_threads = 1
        if optimized_model is not None:
            options.optimized_model_filepath = str(optimized_model)
        self.session = ort.InferenceSession(
            session_source(model, workdir, "target"),
            options,
            providers=[provider],
            disabled_optimizers=list(spec.disabled_optimizers) or None,
        )

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        inputs = {i.name: i.type for i in self.session.get_inputs()}
        feed = {name: _as_type(feeds[name], inputs[name]) for name in inputs}
        names = [o.name for o in self.session.get_outputs()]
        return dict(zip(names, self.session.run(names, feed), strict=True))


_ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def _as_type(value: np.ndarray, ort_type: str) -> np.ndarray:
    dtype = _ORT_TYPES.get(ort_type)
    return np.asarray(value) if dtype is None else np.asarray(value).astype(dtype, copy=False)

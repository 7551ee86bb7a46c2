"""onnxruntime targets: any installed execution provider, a graph optimisation level, and fp16
(the model converted by onnxconverter-common with inputs and outputs kept fp32)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx

from checks.fp16_warnings import summarised_fp16_warnings
from checks.runtimes import RuntimeUnavailableError
from checks.spec import RuntimeSpec

PROTO_LIMIT = 1_800_000_000


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def fp16_storage(model: onnx.ModelProto) -> onnx.ModelProto:
    """fp16 as onnxruntime's CPU provider can show it. The CPU provider has almost no fp16
    kernels: it runs a converted graph in fp32 with "precision-free" casts, which hides overflow
    and rounding of intermediate tensors. So every float tensor (inputs, weights and each node's
    output) is stored in fp16 explicitly: weights are converted by onnxconverter-common's
    ``convert_np_to_float16`` (its clamping) and every other tensor goes through a
    Cast(fp16) -> Cast(fp32) pair, which onnxruntime keeps. Inputs and outputs stay fp32."""
    from onnxconverter_common import float16

    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    types = _float_tensors(result)
    for tensor in graph.initializer:
        if tensor.data_type == onnx.TensorProto.FLOAT:
            value = onnx.numpy_helper.to_array(tensor)
            rounded = float16.convert_np_to_float16(np.atleast_1d(value)).astype(np.float32).reshape(value.shape)
            tensor.CopyFrom(onnx.numpy_helper.from_array(rounded, tensor.name))
    nodes: list[onnx.NodeProto] = []
    renamed: dict[str, str] = {}
    for inp in graph.input:
        if inp.name in types:
            renamed[inp.name] = f"{inp.name}__fp16_storage"
            nodes += _round_trip(inp.name, renamed[inp.name])
    for node in graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = renamed.get(name, name)
        extra: list[onnx.NodeProto] = []
        for i, name in enumerate(node.output):
            if name in types and node.op_type != "Cast":
                node.output[i] = f"{name}__fp32"
                extra += _round_trip(node.output[i], name)
        nodes += [node, *extra]
    del graph.node[:]
    graph.node.extend(nodes)
    return result


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


def to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """fp32 -> fp16 with inputs/outputs kept fp32 (Cast nodes at the edges)."""
    from onnxconverter_common import float16

    converted: onnx.ModelProto = float16.convert_float_to_float16(
        model, keep_io_types=True, disable_shape_infer=model.ByteSize() > PROTO_LIMIT
    )
    return converted


def session_source(model: onnx.ModelProto, workdir: Path, stem: str) -> str | bytes:
    """Bytes for small models; a file with external data beside it for models near 2 GB."""
    if model.ByteSize() < PROTO_LIMIT:
        data: bytes = model.SerializeToString()
        return data
    path = workdir / f"{stem}.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location=f"{stem}.data")
    return path.as_posix()


class OrtRunner:
    def __init__(self, spec: RuntimeSpec, model: onnx.ModelProto, workdir: Path) -> None:
        import onnxruntime as ort

        provider = spec.provider or "CPUExecutionProvider"
        if provider not in ort.get_available_providers():
            raise RuntimeUnavailableError(
                f"onnxruntime execution provider {provider} is not installed here "
                f"(available: {', '.join(ort.get_available_providers())})"
            )
        if spec.precision == "fp16":
            with summarised_fp16_warnings(_to_stderr):
                model = fp16_storage(model) if provider == "CPUExecutionProvider" else to_fp16(model)
        options = ort.SessionOptions()
        options.graph_optimization_level = {
            "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[spec.optimization]
        options.log_severity_level = 3
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(session_source(model, workdir, "target"), options, providers=[provider])

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

"""``onnx-reducer inspect MODEL``: inputs, outputs and one ``Op: <OpType>`` line per node."""

from __future__ import annotations

import onnx

from reducer_core import modelio


def _type_text(info: onnx.ValueInfoProto) -> str:
    tensor_type = info.type.tensor_type
    if not info.type.HasField("tensor_type"):
        return "[non-tensor]"
    dtype = onnx.TensorProto.DataType.Name(tensor_type.elem_type).lower() if tensor_type.elem_type else "?"
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor_type.shape.dim]
    shape = f"({', '.join(dims)})" if tensor_type.HasField("shape") else "unknown"
    return f"[dtype={dtype}, shape={shape}]"


def describe(model: onnx.ModelProto) -> list[str]:
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    opsets = ", ".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in model.opset_import)
    lines = ["==== ONNX Model ====", f"Name: {graph.name} | IR: {model.ir_version} | Opsets: {opsets}"]
    lines.append(f"---- {len(inputs)} Graph Input(s) ----")
    lines += [f"{{{i.name} {_type_text(i)}}}" for i in inputs]
    lines.append(f"---- {len(graph.output)} Graph Output(s) ----")
    lines += [f"{{{o.name} {_type_text(o)}}}" for o in graph.output]
    lines.append(f"---- {len(initializers)} Initializer(s) ----")
    lines.append(f"---- {len(graph.node)} Node(s) ----")
    for i, node in enumerate(graph.node):
        name = node.name or f"node_{i}"
        lines.append(f"Node {i:<4} | {name} [Op: {node.op_type}]")
        lines.append(f"    {{{', '.join(n for n in node.input)}}} -> {{{', '.join(node.output)}}}")
    return lines


def inspect_model(path: str, external_data_dir: str | None = None) -> str:
    model, _ = modelio.load_model(path, external_data_dir, ignore_external_data=True)  # structure only
    return "\n".join(describe(model))

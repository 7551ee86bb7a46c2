"""Numeric fault against layerwise golden values (Polygraphy's "golden values ahead of time").

``numeric.py MODEL --golden GOLDEN.npz --fault NODE [--bias 1.0] [--atol 1e-3]``: the candidate
runs in onnxruntime with every graph input fed from the full model's layerwise values, but with
the node ``--fault`` made faulty (``--bias`` is added to its first output, as a miscompiled kernel
would). Each graph output is compared with its golden value; a mismatch fails."""

import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort
from _common import finish
from onnx import helper, numpy_helper


def load_golden(path: str) -> dict[str, np.ndarray]:
    data = np.load(path)
    names = [str(n) for n in data["names"]]
    return {name: data[f"t{i}"] for i, name in enumerate(names)}


def load_with_weights(path: str) -> onnx.ModelProto:
    """``onnx.load`` with external data read here: onnx >= 1.19 refuses weight files with several
    hard links ("potential hardlink attack"), and onnx-reducer hardlinks the original weights
    beside each iteration model."""
    model = onnx.load(path, load_external_data=False)
    base = os.path.dirname(os.path.abspath(path))
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        with open(os.path.join(base, info["location"]), "rb") as f:
            f.seek(int(info.get("offset", 0)))
            tensor.raw_data = f.read(int(info["length"])) if "length" in info else f.read()
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
    return model


def inject_fault(model: onnx.ModelProto, node_name: str, bias: float) -> bool:
    graph = model.graph
    for position, node in enumerate(graph.node):
        if node.name == node_name:
            out = node.output[0]
            node.output[0] = out + "__faulty"
            graph.initializer.append(numpy_helper.from_array(np.float32(bias), out + "__bias"))
            add = helper.make_node("Add", [out + "__faulty", out + "__bias"], [out], name=node_name + "__fault")
            graph.node.insert(position + 1, add)
            return True
    return False


parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--golden", required=True)
parser.add_argument("--fault", required=True)
parser.add_argument("--bias", type=float, default=1.0)
parser.add_argument("--atol", type=float, default=1e-3)
parser.add_argument("--rtol", type=float, default=1e-3)
args = parser.parse_args()
model = load_with_weights(args.model)
count = len(model.graph.node)
golden = load_golden(args.golden)
inject_fault(model, args.fault, args.bias)
initializers = {t.name for t in model.graph.initializer}
feeds = {i.name: golden[i.name] for i in model.graph.input if i.name not in initializers}
options = ort.SessionOptions()
options.intra_op_num_threads = 1
options.log_severity_level = 3
try:
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    outputs = session.run(None, feeds)
except Exception as exc:  # noqa: BLE001 - an unrunnable candidate is not this failure
    print(f"ERROR: candidate does not run: {type(exc).__name__}: {str(exc)[:200]}")
    finish("numeric", False, count)
bad = [
    o.name
    for o, value in zip(session.get_outputs(), outputs, strict=True)
    if not np.allclose(value, golden[o.name], atol=args.atol, rtol=args.rtol)
]
finish("numeric", bool(bad), count, f"MISMATCH in {bad[:3]}")

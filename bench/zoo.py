"""The benchmark's model zoo, built in code (deterministic: fixed seeds, fixed names).

Every node has a unique name (``<model>/<block>/<op>``) so that check scripts and both reducers
agree on node identity. Constants are initializers (never Constant nodes), so node counts are
comparable between onnx-reducer (which lowers Constant nodes) and Polygraphy (which does not).

Models (see bench/README.md):
- ``chain``        40 elementwise nodes in a line.
- ``chain200``     the same ops, 200 nodes in a line (large answers: a path through most of it).
- ``residual``     40 blocks MatMul/Tanh/Add with skip connections (120 nodes; paths through it).
- ``rescnn``       residual CNN: stem Conv, 6 Conv/Relu/Conv/Add/Relu blocks, pool, Gemm.
- ``transformer``  3 attention+FFN blocks with Shape/Gather/Concat/Reshape shape arithmetic.
- ``multi_io``     2 inputs, 2 outputs, branches that cross.
- ``dynamic``      a chain whose batch dimension is symbolic (dim_param "batch").
- ``big10k``       10,000 nodes: 2,000 residual blocks Gather/Add/Mul/Tanh/Add, tiny weights.
- ``loop30``, ``if20``, ``nested2``  failures inside Loop/If bodies (``control_flow_zoo.py``).
- ``big10k_1g``    the same graph (same nodes, same names), but every Gather reads an
                   [8192, 16] float32 table in one external-data file: ~1 GB of weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from control_flow_zoo import if_model, loop_model, nested_model
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
FLOAT = TensorProto.FLOAT


@dataclass
class Builder:
    """Collects nodes and initializers; ``op`` returns the output tensor name."""

    prefix: str
    rng: np.random.Generator
    nodes: list[onnx.NodeProto]
    inits: list[onnx.TensorProto]

    @classmethod
    def new(cls, prefix: str, seed: int) -> Builder:
        return cls(prefix, np.random.default_rng(seed), [], [])

    def op(self, op_type: str, name: str, inputs: list[str], n_out: int = 1, **attrs: object) -> str:
        full = f"{self.prefix}/{name}"
        outputs = [f"{full}:{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=full, **attrs))
        return outputs[0]

    def const(self, name: str, value: np.ndarray) -> str:
        full = f"{self.prefix}/{name}"
        self.inits.append(numpy_helper.from_array(value, full))
        return full

    def weight(self, name: str, shape: tuple[int, ...], scale: float = 0.3) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.prefix, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="bench-zoo")
        model.ir_version = IR_VERSION
        return model


def _io(name: str, shape: list[int | str], dtype: int = FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def chain() -> onnx.ModelProto:
    return _elementwise_chain("chain", 1, 40)


def chain200() -> onnx.ModelProto:
    """200 elementwise nodes in a line (the ops of ``chain``), for answers that hold most of it."""
    return _elementwise_chain("chain200", 9, 200)


def _elementwise_chain(name: str, seed: int, length: int) -> onnx.ModelProto:
    b = Builder.new(name, seed)
    x = "x"
    ops = ["Add", "Relu", "Mul", "Tanh", "Sub", "Sigmoid", "Abs", "Neg"]
    for i in range(length):
        op = ops[i % len(ops)]
        if op in ("Add", "Mul", "Sub"):
            x = b.op(op, f"{i}_{op.lower()}", [x, b.weight(f"c{i}", (1, 32))])
        else:
            x = b.op(op, f"{i}_{op.lower()}", [x])
    b.nodes[-1].output[0] = "y"
    return b.model([_io("x", [1, 32])], [_io("y", [1, 32])])


def residual() -> onnx.ModelProto:
    """40 residual blocks ``h = Tanh(MatMul(x, W)); x = Add(x, h)`` (120 nodes): every path from
    one block to a later one may go through the skip connections (the Adds) alone."""
    b = Builder.new("residual", 10)
    x = "x"
    for i in range(40):
        h = b.op("MatMul", f"b{i}/mm", [x, b.weight(f"b{i}/w", (16, 16), 0.2)])
        h = b.op("Tanh", f"b{i}/tanh", [h])
        x = b.op("Add", f"b{i}/add", [x, h])
    b.nodes[-1].output[0] = "y"
    return b.model([_io("x", [1, 16])], [_io("y", [1, 16])])


def rescnn() -> onnx.ModelProto:
    b = Builder.new("rescnn", 2)
    c = 8

    def conv(name: str, x: str) -> str:
        w = b.weight(f"{name}_w", (c, c, 3, 3), 0.15)
        return b.op("Conv", name, [x, w, b.weight(f"{name}_b", (c,), 0.1)], pads=[1, 1, 1, 1])

    x = b.op("Relu", "stem_relu", [conv("stem_conv", "x")])
    for i in range(6):
        h = b.op("Relu", f"b{i}/relu1", [conv(f"b{i}/conv1", x)])
        h = conv(f"b{i}/conv2", h)
        x = b.op("Relu", f"b{i}/relu2", [b.op("Add", f"b{i}/add", [h, x])])
    x = b.op("Flatten", "flatten", [b.op("GlobalAveragePool", "pool", [x])])
    b.op("Gemm", "fc", [x, b.weight("fc_w", (10, c)), b.weight("fc_b", (10,))], transB=1)
    b.nodes[-1].output[0] = "y"
    return b.model([_io("x", [1, c, 16, 16])], [_io("y", [1, 10])])


def transformer() -> onnx.ModelProto:
    b = Builder.new("transformer", 3)
    s, d = 8, 16
    x = "x"
    for i in range(3):
        p = f"b{i}"
        q = b.op("MatMul", f"{p}/q", [x, b.weight(f"{p}/wq", (d, d))])
        k = b.op("MatMul", f"{p}/k", [x, b.weight(f"{p}/wk", (d, d))])
        v = b.op("MatMul", f"{p}/v", [x, b.weight(f"{p}/wv", (d, d))])
        kt = b.op("Transpose", f"{p}/kt", [k], perm=[0, 2, 1])
        scores = b.op("Mul", f"{p}/scale", [b.op("MatMul", f"{p}/qk", [q, kt]), b.const(f"{p}/s", np.float32([0.25]))])
        attn = b.op("MatMul", f"{p}/av", [b.op("Softmax", f"{p}/softmax", [scores], axis=-1), v])
        flat = b.op("Reshape", f"{p}/flatten", [attn, b.const(f"{p}/flat_shape", np.int64([-1, d]))])
        shape = b.op("Shape", f"{p}/shape", [x])
        dims = b.op("Gather", f"{p}/gather", [shape, b.const(f"{p}/idx", np.int64([0, 1]))], axis=0)
        new_shape = b.op("Concat", f"{p}/concat", [dims, b.const(f"{p}/d", np.int64([d]))], axis=0)
        attn = b.op("Reshape", f"{p}/unflatten", [flat, new_shape])
        x = b.op("Add", f"{p}/res1", [x, attn])
        h = b.op("Relu", f"{p}/ffn_relu", [b.op("MatMul", f"{p}/ffn1", [x, b.weight(f"{p}/w1", (d, 2 * d))])])
        x = b.op("Add", f"{p}/res2", [x, b.op("MatMul", f"{p}/ffn2", [h, b.weight(f"{p}/w2", (2 * d, d))])])
    b.nodes[-1].output[0] = "y"
    return b.model([_io("x", [1, s, d])], [_io("y", [1, s, d])])


def multi_io() -> onnx.ModelProto:
    b = Builder.new("multi_io", 4)
    a = b.op("Relu", "a_relu", ["a"])
    a = b.op("Mul", "a_mul", [a, b.weight("a_c", (1, 16))])
    bb = b.op("Sigmoid", "b_sigmoid", ["b"])
    bb = b.op("Add", "b_add", [bb, b.weight("b_c", (1, 16))])
    cross1 = b.op("Add", "cross1", [a, bb])
    cross2 = b.op("Mul", "cross2", [a, bb])
    left = b.op("Tanh", "left_tanh", [cross1])
    left = b.op("Sub", "left_sub", [left, b.weight("l_c", (1, 16))])
    left = b.op("Abs", "left_abs", [left])
    right = b.op("Neg", "right_neg", [cross2])
    right = b.op("Relu", "right_relu", [right])
    right = b.op("Add", "right_add", [right, cross1])
    mix = b.op("Mul", "mix", [left, right])
    b.op("Add", "out1_add", [mix, b.op("Sigmoid", "out1_sig", [left])])
    b.nodes[-1].output[0] = "o1"
    b.op("Sub", "out2_sub", [b.op("Tanh", "out2_tanh", [right]), mix])
    b.nodes[-1].output[0] = "o2"
    return b.model([_io("a", [1, 16]), _io("b", [1, 16])], [_io("o1", [1, 16]), _io("o2", [1, 16])])


def dynamic() -> onnx.ModelProto:
    b = Builder.new("dynamic", 5)
    x = "x"
    for i in range(5):
        h = b.op("MatMul", f"{i}/mm", [x, b.weight(f"{i}/w", (16, 16))])
        h = b.op("Add", f"{i}/bias", [h, b.weight(f"{i}/b", (16,))])
        h = b.op("Tanh", f"{i}/tanh", [h])
        x = b.op("Add", f"{i}/res", [x, h])
    b.nodes[-1].output[0] = "y"
    return b.model([_io("x", ["batch", 16])], [_io("y", ["batch", 16])])


BIG_BLOCKS = 2000
BIG_ROWS = 8192  # rows of each Gather table in big10k_1g: 2000 * 8192 * 16 * 4 B = 1.05 GB
SIGMOID_BLOCKS = (1234, 1777)  # the only blocks whose activation is Sigmoid instead of Tanh


def _big_graph(rows: int) -> tuple[Builder, list[str]]:
    """10,000 nodes; the Gather tables have ``rows`` rows (Gather picks row 0: same values)."""
    b = Builder.new("big10k", 6)
    x = "x"
    tables = []
    idx = b.const("idx", np.int64([0]))
    half = b.const("half", np.float32([0.5]))
    for i in range(BIG_BLOCKS):
        table = f"big10k/table{i}"
        tables.append(table)
        g = b.op("Gather", f"{i}/gather", [table, idx], axis=0)
        h = b.op("Add", f"{i}/add", [x, g])
        h = b.op("Mul", f"{i}/mul", [h, half])
        h = b.op("Sigmoid" if i in SIGMOID_BLOCKS else "Tanh", f"{i}/act", [h])
        x = b.op("Add", f"{i}/res", [x, h])
    b.nodes[-1].output[0] = "y"
    del rows
    return b, tables


def big10k() -> onnx.ModelProto:
    b, tables = _big_graph(1)
    rng = np.random.default_rng(7)
    for name in tables:
        b.inits.append(numpy_helper.from_array((rng.standard_normal((1, 16)) * 0.1).astype(np.float32), name))
    return b.model([_io("x", [1, 16])], [_io("y", [1, 16])])


def _write_big_weights(path: Path, tables: int, rows: int) -> None:
    """Row 0 of each table is small noise, the rest a cheap repeating pattern; written in chunks."""
    rng = np.random.default_rng(8)
    filler = np.tile(np.arange(16, dtype=np.float32) * 1e-3, (rows - 1, 1))
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        for _ in range(tables):
            f.write((rng.standard_normal((1, 16)) * 0.1).astype(np.float32).tobytes())
            f.write(filler.tobytes())
    tmp.replace(path)


def big10k_1g(out_dir: Path) -> onnx.ModelProto:
    b, tables = _big_graph(BIG_ROWS)
    weights = out_dir / "big10k_1g.weights"
    table_bytes = BIG_ROWS * 16 * 4
    if not weights.exists() or weights.stat().st_size != table_bytes * len(tables):
        _write_big_weights(weights, len(tables), BIG_ROWS)
    for i, name in enumerate(tables):
        tensor = TensorProto(name=name, data_type=FLOAT, dims=[BIG_ROWS, 16])
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", weights.name), ("offset", str(i * table_bytes)), ("length", str(table_bytes))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        b.inits.append(tensor)
    return b.model([_io("x", [1, 16])], [_io("y", [1, 16])])


SMALL: dict[str, Callable[[], onnx.ModelProto]] = {
    "chain": chain,
    "chain200": chain200,
    "residual": residual,
    "rescnn": rescnn,
    "transformer": transformer,
    "multi_io": multi_io,
    "dynamic": dynamic,
    "big10k": big10k,
    "loop30": loop_model,
    "if20": if_model,
    "nested2": nested_model,
}
ALL_MODELS = (*SMALL, "big10k_1g")


def build(name: str, out_dir: Path) -> Path:
    """Write model ``name`` to ``out_dir/models/<name>/<name>.onnx`` (reused when present)."""
    folder = out_dir / "models" / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.onnx"
    if path.exists():
        return path
    model = big10k_1g(folder) if name == "big10k_1g" else SMALL[name]()
    if name != "big10k_1g":
        onnx.checker.check_model(model)
    tmp = folder / f"{name}.tmp.onnx"
    onnx.save(model, str(tmp))
    tmp.replace(path)
    return path


if __name__ == "__main__":
    import sys

    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "out"
    for model_name in ALL_MODELS:
        print(build(model_name, target))

"""Smaller inputs on real-export style cases: a BERT layer (batch 1 x 256 tokens, hidden 64,
single-head attention, GELU feed-forward, LayerNorms, a pooled output) with an fp16 overflow that
needs large values, reduced by ``onnx-reducer reduce`` with a compare spec (onnxruntime fp32 vs
fp16, inputs uniform in [0, 10], tolerances wide enough that only inf/NaN fail). Each case runs
twice, without (the default) and with ``--reduce-data``; the table gives the min-bad model's input
elements before and after, and the checks the data phase added.

- ``scores``: large query/key weights, the attention scores QK^T overflow at every position: the
  sequence shrinks to 1 (the hidden size stays: it is the weights' contraction dimension).
- ``pool``: the pooled output sums the tokens after a large scale: the sum overflows only from a
  few tokens on, so the sequence shrinks to the shortest that still overflows.
- ``positions``: BERT's embedding sum, token embeddings (the input) plus a position table of
  1024 x 64 read by Gather at the constant positions 0..255, squared: large position values
  overflow. The input sequence cannot shrink alone (the positions are constants), so the weight
  step shrinks it with the positions, then the hidden size with the table's columns, and slices
  the table to the rows still read.

The table also gives the min-bad model's initializer bytes before and after.

    .venv/bin/python bench/data_bench.py        # prints a Markdown table (about 2 minutes)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEQ, HIDDEN, FFN = 256, 64, 256
SPEC = """kind: compare
reference: {runtime: onnxruntime}
target: {runtime: onnxruntime, precision: fp16}
tolerance: {atol: 1.0e+6, rtol: 1.0}
input_range: [0, 10]
"""


def bert_layer(case: str) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def weight(name: str, shape: tuple[int, ...], scale: float) -> str:
        return const(name, rng.standard_normal(shape) * scale)

    def op(op_type: str, name: str, inputs: list[str], **attrs: object) -> str:
        nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    qk_scale = 30.0 if case == "scores" else 0.05
    pool_scale = 6000.0 if case == "pool" else 1.0
    ones, zeros = np.ones(HIDDEN), np.zeros(HIDDEN)
    ln1 = op("LayerNormalization", "ln1", ["x", const("ln1.g", ones), const("ln1.b", zeros)], axis=-1)
    q = op("MatMul", "q", [ln1, weight("wq", (HIDDEN, HIDDEN), qk_scale)])
    k = op("MatMul", "k", [ln1, weight("wk", (HIDDEN, HIDDEN), qk_scale)])
    v = op("MatMul", "v", [ln1, weight("wv", (HIDDEN, HIDDEN), 0.1)])
    kt = op("Transpose", "kt", [k], perm=[0, 2, 1])
    scores = op("MatMul", "scores", [q, kt])
    scaled = op("Mul", "scaled", [scores, const("inv_sqrt_d", np.array(1 / 8))])
    probs = op("Softmax", "softmax", [scaled], axis=-1)
    context = op("MatMul", "context", [probs, v])
    attn = op("MatMul", "attn_out", [context, weight("wo", (HIDDEN, HIDDEN), 0.1)])
    res1 = op("Add", "res1", ["x", attn])
    ln2 = op("LayerNormalization", "ln2", [res1, const("ln2.g", ones), const("ln2.b", zeros)], axis=-1)
    mm1 = op("MatMul", "ffn1_mm", [ln2, weight("w1", (HIDDEN, FFN), 0.1)])
    h1 = op("Add", "ffn1", [mm1, const("b1", np.zeros(FFN))])
    erf = op("Erf", "gelu_erf", [op("Mul", "gelu_div", [h1, const("inv_sqrt2", np.array(2**-0.5))])])
    half = op("Mul", "gelu_half", [h1, const("half", np.array(0.5))])
    gelu = op("Mul", "gelu", [half, op("Add", "gelu_one", [erf, const("one", np.array(1.0))])])
    ffn = op("MatMul", "ffn2_mm", [gelu, weight("w2", (FFN, HIDDEN), 0.1)])
    res2 = op("Add", "res2", [ln2, ffn])
    out = op("LayerNormalization", "ln3", [res2, const("ln3.g", ones), const("ln3.b", zeros)], axis=-1)
    big = op("Mul", "pool_scale", [out, const("pool_k", np.array(pool_scale))])
    inits.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "axis"))
    op("ReduceSum", "pooled", [big, "axis"], keepdims=1)
    graph = helper.make_graph(
        nodes,
        f"bert_{case}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [
            helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, SEQ, HIDDEN]),
            helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, 1, HIDDEN]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def positions_layer() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    table = (rng.standard_normal((4 * SEQ, HIDDEN)) * 3000).astype(np.float32)
    inits = [
        numpy_helper.from_array(table, "pos_table"),
        numpy_helper.from_array(np.arange(SEQ, dtype=np.int64)[None, :], "position_ids"),
    ]
    nodes = [
        helper.make_node("Gather", ["pos_table", "position_ids"], ["pos"], name="pos_embed", axis=0),
        helper.make_node("Add", ["x", "pos"], ["emb"], name="emb_add"),
        helper.make_node("Mul", ["emb", "emb"], ["sq"], name="square"),
        helper.make_node("ReduceMean", ["sq"], ["energy"], name="energy", axes=[-1], keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "bert_positions",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [helper.make_tensor_value_info("energy", TensorProto.FLOAT, [1, SEQ, 1])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def reduce(folder: Path, case: str, data: bool) -> dict[str, object]:
    model = folder / f"{case}.onnx"
    onnx.save(positions_layer() if case == "positions" else bert_layer(case), model)
    (folder / "spec.yaml").write_text(SPEC)
    summary = folder / f"{case}-{data}.json"
    argv = [sys.executable, "-m", "reducer_cli.main", "reduce", str(model), "-o", str(folder / "r.onnx")]
    argv += ["--check-spec", str(folder / "spec.yaml"), "--summary-json", str(summary), "--no-progress"]
    argv += ["--reduce-data"] if data else []
    subprocess.run(argv, check=True, cwd=folder, capture_output=True)
    result: dict[str, object] = json.loads(summary.read_text())
    return result


def main() -> None:
    print(
        "| case | min-bad nodes | checks without / with | data checks | min-bad inputs before | after "
        "| elements | initializer bytes | weight edits |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for case in ("scores", "pool", "positions"):
            plain, shrunk = reduce(folder, case, False), reduce(folder, case, True)
            iterations = shrunk["iterations"]
            assert isinstance(iterations, list)
            data_checks = sum(1 for it in iterations if it["phase"] == "data")
            sizes = shrunk["smaller_inputs"]
            assert isinstance(sizes, dict)
            nodes = ", ".join(str(n) for n in shrunk["min_bad_nodes"])  # type: ignore[attr-defined]
            print(
                f"| {case} | {nodes} | {plain['checks_run']} / {shrunk['checks_run']} | {data_checks} | "
                f"{sizes['inputs_before']} | {sizes['inputs_after']} | "
                f"{sizes['elements_before']} -> {sizes['elements_after']} "
                f"(1/{int(sizes['elements_before']) / max(int(sizes['elements_after']), 1):.0f}) | "
                f"{sizes['initializer_bytes_before']} -> {sizes['initializer_bytes_after']} | "
                f"{sizes['weights'] or '-'} |"
            )


if __name__ == "__main__":
    main()

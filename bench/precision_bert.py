"""The precision cases, side by side: ``onnx-reducer precision`` (this tree, and the tree
in ``--baseline`` if given) beside NVIDIA ModelOpt's AutoCast and onnxconverter-common's
``auto_convert_mixed_precision``, every written file judged the same way.

The case (``--case``, models built here, nothing downloaded): ``bert`` (the default), or
``resnet`` / ``gpt2`` (``bench/precision_models.py``: a CIFAR-style ResNet with a dead
BatchNorm channel pair writing about 90,000 into the classifier's path, inputs in [-128, 128];
a 2-layer GPT-2 decoder whose tanh GELU's Pow overflows and whose MLP writes a massive
activation of about 100,000 read by the final LayerNorm, token ids in [0, 999]).

``bert``: a 2-layer BERT encoder (token and position
embeddings, LayerNormalization, 4-head attention with a mask built from the input's shape,
erf GELU feed-forward, a tanh pooler of the CLS token; ``--pooler none``: the last hidden
state only), 128 hidden, 512 intermediate, sequence 32, vocabulary 1000: 82 nodes. In layer 1
the feed-forward bias of 4 channels is 137,000: ``bias_add`` writes about 137,000 there (>
fp16's 65,504), read by the GELU's Div and Mul (the BERT failure mode of issue 17). The check
spec: compare against onnxruntime fp32, target fp16, atol = rtol = 0.02, token ids in [0, 999]
(every case: the same spec over its inputs' range).

The judge (for every tool's file): the file must pass onnx.checker (full) and load in
onnxruntime; with fp16 storage made real (``checks.fp16_model.storage_real``: every fp16 tensor
rounded through fp16, graph optimisations off, as a GPU stores it) its outputs must be finite
and within the spec's tolerance of the fp32 model's, on the spec's inputs and 4 more samples.
It also captures every intermediate tensor and counts the fp16 tensors holding inf or NaN (and
their values): a fused GPU GELU turns such an inf into NaN (issue 26).

Ours runs twice: the default (no inf in any fp16 tensor) and ``--allow-nonfinite`` (the search's
answer as it is). Beside them, AutoCast's range rule with ``--data_max 65504`` and with its
default 512 emulated on the fp32 model's run of the same 5 samples: the nodes whose float output
exceeds the limit in magnitude, and the nodes one of whose float inputs or outputs (weights
included) does.

    .venv/bin/python bench/precision_bert.py OUT_DIR [--autocast-python /work/autocast-venv/bin/python]
        [--baseline /path/to/other/checkout] [--case bert|resnet|gpt2] [--pooler cls|none]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxconverter_common import auto_mixed_precision

from checks.fp16_model import elem_types, is_mixed, storage_real
from checks.ort_runtime import random_inputs

if __package__ in (None, ""):  # run as a script: the checkout's root, for the ``bench`` namespace
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.precision_models import GPT_INPUT_RANGE, RESNET_INPUT_RANGE, Graph, all_values, gpt2_like, resnet_like

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64
HIDDEN, HEADS, FFN, SEQ, VOCAB, LAYERS = 128, 4, 512, 32, 1000, 2
ATOL = RTOL = 0.02
BERT_INPUT_RANGE = (0.0, float(VOCAB - 1))
ROOT = Path(__file__).resolve().parents[1]


def spec(input_range: tuple[float, float]) -> str:
    """The compare spec: onnxruntime fp32 against fp16, atol = rtol = 0.02, inputs in ``input_range``."""
    low, high = (int(v) if float(v).is_integer() else v for v in input_range)
    return f"""kind: compare
reference: {{runtime: onnxruntime}}
target: {{runtime: onnxruntime, precision: fp16}}
tolerance: {{atol: {ATOL}, rtol: {RTOL}}}
input_range: [{low}, {high}]
"""


@dataclass(frozen=True)
class Case:
    """A bench model and the range of its inputs (the spec's ``input_range``)."""

    build: Callable[[str], onnx.ModelProto]  # the BERT pooler option (ignored by the others)
    input_range: tuple[float, float]


CASES = {
    "bert": Case(lambda pooler: bert_like(pooler=pooler), BERT_INPUT_RANGE),
    "resnet": Case(lambda _: resnet_like(), RESNET_INPUT_RANGE),
    "gpt2": Case(lambda _: gpt2_like(), GPT_INPUT_RANGE),
}


class _Graph(Graph):
    def heads(self, name: str, x: str, shape: str) -> str:
        return self.op(
            "Transpose", f"{name}.heads", [self.op("Reshape", f"{name}.reshape", [x, shape])], perm=[0, 2, 1, 3]
        )

    def norm(self, name: str, x: str) -> str:
        gamma = self.w(f"{name}.gamma", np.ones(HIDDEN, np.float32))
        beta = self.w(f"{name}.beta", np.zeros(HIDDEN, np.float32))
        return self.op("LayerNormalization", name, [x, gamma, beta], axis=-1, epsilon=1e-12)


def bert_like(seed: int = 0, pooler: str = "cls") -> onnx.ModelProto:
    g = _Graph(seed)
    ids = "input_ids"
    words = g.op("Gather", "embeddings.word", [g.rand("word_embeddings", (VOCAB, HIDDEN), 0.5), ids], axis=0)
    positions = g.rand("position_embeddings", (1, SEQ, HIDDEN), 0.5)
    x = g.norm("embeddings.norm", g.op("Add", "embeddings.add", [words, positions]))
    # the attention mask from the input's shape (all ones), as exports build it
    shape = g.op("Shape", "mask.shape", [ids])
    ones = g.op("ConstantOfShape", "mask.ones", [shape], value=helper.make_tensor("one", FLOAT, [1], [1.0]))
    inverted = g.op("Sub", "mask.invert", [g.w("mask.one", np.array(1.0, np.float32)), ones])
    bias = g.op("Mul", "mask.scale", [inverted, g.w("mask.min", np.array(-10000.0, np.float32))])
    mask = g.op("Unsqueeze", "mask.unsqueeze", [bias, g.w("mask.axes", np.array([1, 2], np.int64))])
    heads = g.w("heads_shape", np.array([1, SEQ, HEADS, HIDDEN // HEADS], np.int64))
    merged = g.w("merged_shape", np.array([1, SEQ, HIDDEN], np.int64))
    for layer in range(LAYERS):
        p = f"layer{layer}"
        q, k, v = (
            g.heads(f"{p}.{n}", g.linear(f"{p}.{n}", x, HIDDEN, HIDDEN), heads) for n in ("query", "key", "value")
        )
        kt = g.op("Transpose", f"{p}.key.t", [k], perm=[0, 1, 3, 2])
        sqrt_d = g.w(f"{p}.sqrt_d", np.array(np.sqrt(HIDDEN // HEADS), np.float32))
        scores = g.op("Div", f"{p}.scores.scale", [g.op("MatMul", f"{p}.scores", [q, kt]), sqrt_d])
        probs = g.op("Softmax", f"{p}.softmax", [g.op("Add", f"{p}.scores.mask", [scores, mask])], axis=-1)
        context = g.op("Transpose", f"{p}.context.t", [g.op("MatMul", f"{p}.context", [probs, v])], perm=[0, 2, 1, 3])
        context = g.op("Reshape", f"{p}.context.merge", [context, merged])
        attended = g.linear(f"{p}.attention.out", context, HIDDEN, HIDDEN)
        x = g.norm(f"{p}.attention.norm", g.op("Add", f"{p}.attention.residual", [attended, x]))
        ffn_bias = np.zeros(FFN, np.float32)
        down = (g.rng.standard_normal((FFN, HIDDEN)) / np.sqrt(FFN)).astype(np.float32)
        if layer == 1:  # the planted overflow: bias_add writes about 137,000 in 4 channels
            ffn_bias[:4], down[:4] = 137000.0, down[:4] * 2e-5
        h = g.linear(f"{p}.ffn.up", x, HIDDEN, FFN, ffn_bias)
        sqrt2, one = g.w(f"{p}.sqrt2", np.array(np.sqrt(2.0), np.float32)), g.w(f"{p}.one", np.array(1.0, np.float32))
        erf = g.op("Erf", f"{p}.gelu.erf", [g.op("Div", f"{p}.gelu.div", [h, sqrt2])])
        gelu = g.op("Mul", f"{p}.gelu.mul", [h, g.op("Add", f"{p}.gelu.add", [erf, one])])
        gelu = g.op("Mul", f"{p}.gelu.half", [gelu, g.w(f"{p}.half", np.array(0.5, np.float32))])
        down_w = g.w(f"{p}.ffn.down.weight", down)
        product = g.op("MatMul", f"{p}.ffn.down.matmul", [gelu, down_w])
        out = g.op("Add", f"{p}.ffn.down.bias_add", [product, g.w(f"{p}.ffn.down.bias", np.zeros(HIDDEN, np.float32))])
        x = g.norm(f"{p}.ffn.norm", g.op("Add", f"{p}.ffn.residual", [out, x]))
    outputs = [helper.make_tensor_value_info(x, FLOAT, [1, SEQ, HIDDEN])]
    if pooler == "cls":
        cls = g.op("Gather", "pooler.cls", [x, g.w("cls_index", np.array(0, np.int64))], axis=1)
        pooled = g.op("Tanh", "pooler.tanh", [g.linear("pooler.dense", cls, HIDDEN, HIDDEN)])
        outputs.append(helper.make_tensor_value_info(pooled, FLOAT, [1, HIDDEN]))
    graph = helper.make_graph(
        g.nodes,
        "bert_like",
        [helper.make_tensor_value_info(ids, INT64, [1, SEQ])],
        outputs,
        initializer=g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


# --- the judge ------------------------------------------------------------------------------------


def samples(model: onnx.ModelProto, input_range: tuple[float, float] = BERT_INPUT_RANGE) -> list[dict[str, np.ndarray]]:
    """The spec's inputs (seed 1, as its check generates them) and 4 more samples."""
    return [random_inputs(model, seed, *input_range) for seed in (1, 2, 3, 4, 5)]


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], optimise: bool = True) -> list[np.ndarray]:
    options = ort.SessionOptions()
    if not optimise:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    types = {i.name: i.type for i in session.get_inputs()}
    cast = {k: v.astype(np.float16) if types[k] == "tensor(float16)" else v for k, v in feeds.items()}
    return [np.asarray(v, np.float32) for v in session.run(None, cast)]


def fp32_nodes(model: onnx.ModelProto) -> int:
    """Nodes (not Cast, not Constant) computing a float tensor that the file types fp32."""
    types = elem_types(model)
    return sum(
        1
        for n in model.graph.node
        if n.op_type not in ("Cast", "Constant") and any(types.get(o) == FLOAT for o in n.output)
    )


def nonfinite_fp16(
    model: onnx.ModelProto, original: onnx.ModelProto, input_range: tuple[float, float] = BERT_INPUT_RANGE
) -> tuple[int, int]:
    """The fp16 tensors of a typed model holding inf/NaN with fp16 storage made real, every
    intermediate captured, over the 5 samples: (tensors, values)."""
    types = elem_types(model)
    half = {name for name, kind in types.items() if kind == TensorProto.FLOAT16}
    real = storage_real(model)
    tensors: set[str] = set()
    values = 0
    for feeds in samples(original, input_range):
        for name, value in all_values(real, feeds).items():
            if name in half and not np.isfinite(value).all():
                tensors.add(name)
                values += int((~np.isfinite(value)).sum())
    return len(tensors), values


def autocast_like(
    model: onnx.ModelProto, data_max: float = 65504.0, input_range: tuple[float, float] = BERT_INPUT_RANGE
) -> tuple[int, int]:
    """AutoCast's range rule emulated on the fp32 model's run of the 5 samples: (nodes whose float
    output exceeds ``data_max``, nodes one of whose float inputs or outputs, weights included, does)."""
    peak: dict[str, float] = {
        t.name: float(np.abs(numpy_helper.to_array(t)).max(initial=0.0)) for t in model.graph.initializer
    }
    for feeds in samples(model, input_range):
        for name, value in (all_values(model, feeds) | feeds).items():
            if value.dtype.kind == "f":
                peak[name] = max(peak.get(name, 0.0), float(np.abs(value).max(initial=0.0)))
    out = sum(1 for n in model.graph.node if any(peak.get(o, 0.0) > data_max for o in n.output))
    io = sum(1 for n in model.graph.node if any(peak.get(t, 0.0) > data_max for t in [*n.input, *n.output] if t))
    return out, io


def judge(
    path: Path, original: onnx.ModelProto, input_range: tuple[float, float] = BERT_INPUT_RANGE
) -> dict[str, object]:
    model = onnx.load(str(path))
    verdict: dict[str, object] = {"fp32_nodes": fp32_nodes(model)}
    try:
        onnx.checker.check_model(model, full_check=True)
        verdict["checker"] = "ok"
    except Exception as exc:  # noqa: BLE001 - reported
        verdict["checker"] = f"{type(exc).__name__}: {str(exc)[:80]}"
    real = storage_real(model) if is_mixed(model) or fp32_nodes(model) < len(model.graph.node) else model
    finite, worst, within = True, 0.0, True
    try:
        for feeds in samples(original, input_range):
            want = _run(original, feeds)
            _run(model, feeds)  # loads and runs as written
            for got, ref in zip(_run(real, feeds, optimise=False), want, strict=True):
                finite &= bool(np.isfinite(got).all())
                diff = np.abs(got.astype(np.float64) - ref)
                worst = max(worst, float(np.nanmax(np.where(np.isfinite(diff), diff, np.inf))))
                within &= bool(np.all((diff <= ATOL) | (diff <= RTOL * np.abs(ref))))
    except Exception as exc:  # noqa: BLE001 - a file that does not load or run is reported
        return verdict | {"loads": f"no: {str(exc).splitlines()[0][:160]}", "finite": False, "passes": False}
    verdict |= {"loads": "yes", "finite": finite, "max_abs_err": worst, "passes": finite and within}
    verdict["inf_fp16"] = nonfinite_fp16(model, original, input_range) if is_mixed(model) else (0, 0)
    return verdict


# --- the arms -------------------------------------------------------------------------------------


def ours(folder: Path, root: Path, label: str, *extra: str) -> dict[str, object]:
    out = folder / f"{label}.onnx"
    summary = folder / f"{label}.json"
    command = [sys.executable, "-m", "reducer_cli.main", "precision", "model.onnx", "-o", out.name, *extra]
    command += ["--check-spec", "spec.yaml", "--summary-json", summary.name, "--no-progress", "-q"]
    command += ["--save-debug-replay", f"{label}-replay.json"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    began = time.monotonic()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - began
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-300:]}", "time_s": elapsed}
    data = json.loads(summary.read_text())
    return {"kept": len(data["keep_fp32"]), "checks": data["checks_run"], "time_s": elapsed, "file": out}


AUTOCAST = """
import json, sys, time
from modelopt.onnx.autocast import convert_to_mixed_precision
import onnx
src, out, calib, data_max = sys.argv[1:5]
began = time.monotonic()
model = convert_to_mixed_precision(onnx_path=src, low_precision_type="fp16", keep_io_types=True,
                                   calibration_data=calib, **({"data_max": float(data_max)} if data_max else {}))
onnx.save(model, out)
print(json.dumps({"time_s": time.monotonic() - began}))
"""


def autocast(folder: Path, python: str, data_max: str) -> dict[str, object]:
    out = folder / f"autocast{data_max or '-default'}.onnx"
    command = [python, "-c", AUTOCAST, "model.onnx", out.name, "calib.npz", data_max]
    began = time.monotonic()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - began
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-300:]}", "time_s": elapsed}
    return {"checks": 0, "time_s": elapsed, "file": out}


def auto_mixed(folder: Path, model: onnx.ModelProto, input_range: tuple[float, float]) -> dict[str, object]:
    out = folder / "auto_mixed.onnx"
    began = time.monotonic()
    try:
        mixed = auto_mixed_precision.auto_convert_mixed_precision(
            model, samples(model, input_range)[0], rtol=RTOL, atol=ATOL, keep_io_types=True
        )
    except Exception as exc:  # noqa: BLE001 - reported
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}", "time_s": time.monotonic() - began}
    onnx.save(mixed, str(out))
    return {"checks": "n/a", "time_s": time.monotonic() - began, "file": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--autocast-python", default=None, help="A Python with nvidia-modelopt installed.")
    parser.add_argument("--case", choices=sorted(CASES), default="bert", help="The model (default: bert).")
    parser.add_argument("--pooler", choices=("cls", "none"), default="cls", help="BERT's CLS pooler, or none.")
    parser.add_argument("--baseline", type=Path, default=None, help="Another checkout of onnx-reducer to run too.")
    args = parser.parse_args()
    folder: Path = args.out_dir.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    case = CASES[args.case]
    model = case.build(args.pooler)
    onnx.save(model, str(folder / "model.onnx"))
    (folder / "spec.yaml").write_text(spec(case.input_range))
    calib: dict[str, Any] = dict(samples(model, case.input_range)[0])  # (numpy's stub reads a key as allow_pickle)
    np.savez(folder / "calib.npz", **calib)
    rows: dict[str, dict[str, object]] = {
        "onnx-reducer precision (this tree)": ours(folder, ROOT, "ours"),
        "onnx-reducer precision --allow-nonfinite (this tree)": ours(folder, ROOT, "ours-allow", "--allow-nonfinite"),
    }
    if args.baseline is not None:
        rows["onnx-reducer precision (baseline)"] = ours(folder, args.baseline.resolve(), "baseline")
    if args.autocast_python:
        rows["AutoCast, default data_max"] = autocast(folder, args.autocast_python, "")
        rows["AutoCast, data_max 65504"] = autocast(folder, args.autocast_python, "65504")
    rows["onnxconverter-common auto_convert_mixed_precision"] = auto_mixed(folder, model, case.input_range)
    pooler = f" ({args.pooler} pooler)" if args.case == "bert" else ""
    print(f"model: {args.case}, {len(model.graph.node)} nodes{pooler}; tolerance atol = rtol = {ATOL}")
    for data_max in (65504.0, 512.0):
        out, io = autocast_like(model, data_max, case.input_range)
        print(
            f"AutoCast-like (--data_max {data_max:g} emulated): {out} nodes with |output| > {data_max:g}, "
            f"{io} with |input or output| > {data_max:g}"
        )
    print()
    print(
        "| tool | nodes kept fp32 (asked) | fp32 compute nodes in the file | checker | loads in onnxruntime "
        "| finite, fp16 storage real | fp16 tensors holding inf (values) | max abs err | passes | checks | time |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, row in rows.items():
        if "error" in row:
            print(f"| {label} | failed: {row['error']} | | | | | | | | | {row['time_s']:.1f} s |")
            continue
        verdict = judge(Path(str(row["file"])), model, case.input_range)
        print(
            f"| {label} | {row.get('kept', '-')} | {verdict['fp32_nodes']} | {verdict['checker']} | "
            f"{verdict['loads']} | "
            f"{'yes' if verdict['finite'] else 'no'} | {_inf(verdict)} | "
            f"{float(str(verdict.get('max_abs_err', 'nan'))):.4g} | "
            f"{'yes' if verdict['passes'] else 'no'} | {row['checks']} | {row['time_s']:.1f} s |"
        )


def _inf(verdict: dict[str, object]) -> str:
    found = verdict.get("inf_fp16")
    if not isinstance(found, tuple):
        return "-"
    return f"{found[0]} ({found[1]:,})"


if __name__ == "__main__":
    main()

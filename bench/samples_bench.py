"""Several input samples, only the second of three failing (issue 22): a 30-node chain whose Mul
overflows fp16 only for large inputs, three ``.npz`` samples (0.5, 100, 0.5: only sample 1 takes the
Mul beyond fp16's 65504), and a compare fp32-vs-fp16 spec. Runs the real command line:

- ``reduce --check-spec --load-inputs s0 s1 s2`` in each mode: the answer, checks, time, and which
  samples the summary says fail;
- ``golden --load-inputs s0 s1 s2`` then ``reduce --golden``;
- ``precision --load-inputs s0 s1 s2``: the nodes kept fp32;
- for contrast, the same spec on its generated inputs (what ``--load-inputs`` was before: ignored).

    .venv/bin/python bench/samples_bench.py        # prints a Markdown table, writes bench/out/samples.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "samples"
CLI = [sys.executable, "-m", "reducer_cli.main"]
SPEC = """\
kind: compare
reference: {runtime: onnxruntime}
target: {runtime: onnxruntime, precision: fp16}
tolerance: {atol: 0.01, rtol: 0.01}
"""
SAMPLES = (0.5, 100.0, 0.5)


def input_overflow_chain(length: int = 30, fault_at: int = 15, width: int = 8) -> onnx.ModelProto:
    """A chain of ``length`` benign nodes (Relu, Add 0.01) whose node ``fault_at`` multiplies by
    1000 and the next node by 1/1000: in fp16 that Mul overflows (> 65504) only for inputs above
    about 65, so a sample of large inputs fails a compare fp32-vs-fp16 spec and a sample in [0, 1]
    passes. The Mul is named ``n<fault_at>_overflow``. (The tests build it from here too.)"""
    consts = {"k1000": 1000.0, "k1e-3": 1e-3, "tiny": 0.01}
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()]
    nodes, current = [], "x"
    for i in range(length - 1):
        out = f"t{i}"
        if i == fault_at:
            nodes.append(helper.make_node("Mul", [current, "k1000"], [out], name=f"n{i}_overflow"))
        elif i == fault_at + 1:
            nodes.append(helper.make_node("Mul", [current, "k1e-3"], [out], name=f"n{i}_restore"))
        elif i % 2:
            nodes.append(helper.make_node("Relu", [current], [out], name=f"n{i}_relu"))
        else:
            nodes.append(helper.make_node("Add", [current, "tiny"], [out], name=f"n{i}_add"))
        current = out
    nodes.append(helper.make_node("Identity", [current], ["y"], name="out"))
    graph = helper.make_graph(
        nodes,
        "samples",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def run(*args: str) -> tuple[int, float, str]:
    start = time.perf_counter()
    proc = subprocess.run([*CLI, *args], cwd=OUT, capture_output=True, text=True, check=False)
    return proc.returncode, time.perf_counter() - start, proc.stdout + proc.stderr


def reduce_case(name: str, *extra: str) -> dict[str, object]:
    summary = OUT / "summary.json"
    summary.unlink(missing_ok=True)
    code, seconds, log = run("reduce", "model.onnx", "-o", "min_bad.onnx", "--check-spec", "spec.yaml",
                             "--summary-json", "summary.json", "--no-progress", *extra)  # fmt: skip
    data = json.loads(summary.read_text()) if summary.exists() else {}
    return {
        "case": name,
        "exit": code,
        "answer": data.get("min_bad_nodes"),
        "checks": data.get("checks_run"),
        "seconds": round(seconds, 2),
        "samples": data.get("samples"),
        "log_tail": log.strip().splitlines()[-1] if code else "",
    }


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    onnx.save(input_overflow_chain(), str(OUT / "model.onnx"))
    (OUT / "spec.yaml").write_text(SPEC)
    files = []
    for i, value in enumerate(SAMPLES):
        np.savez(OUT / f"s{i}.npz", x=np.full((1, 8), value, np.float32))
        files.append(f"s{i}.npz")
    rows = [reduce_case(f"--load-inputs, mode {m}", "--load-inputs", *files, "--mode", m)
            for m in ("auto", "bisect", "minimize", "linear")]  # fmt: skip
    for mode in ("auto", "bisect"):
        extra = ("--load-inputs", *files, "--mode", mode, "--no-localize")
        rows.append(reduce_case(f"--no-localize, mode {mode}", *extra))
    code, seconds, _ = run("golden", "model.onnx", "-o", "g.golden", "--load-inputs", *files)
    golden = reduce_case("golden --load-inputs, then --golden", "--golden", "g.golden")
    golden["seconds"] = round(float(str(golden["seconds"])) + seconds, 2)
    rows.append(golden)
    rows.append(reduce_case("generated inputs (no --load-inputs)"))
    code, seconds, _ = run("precision", "model.onnx", "-o", "mixed.onnx", "--check-spec", "spec.yaml",
                           "--summary-json", "p.json", "--no-progress", "--load-inputs", *files)  # fmt: skip
    precision = json.loads((OUT / "p.json").read_text()) if code == 0 else {}
    rows.append({
        "case": "precision --load-inputs",
        "exit": code,
        "answer": precision.get("keep_fp32"),
        "checks": precision.get("checks_run"),
        "seconds": round(seconds, 2),
        "samples": precision.get("samples"),
        "log_tail": "",
    })  # fmt: skip
    (OUT.parent / "samples.json").write_text(json.dumps(rows, indent=1))
    print("| case | exit | answer | checks | time (s) | failing samples (original / answer) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        samples = row["samples"]
        failing = (
            f"{samples['original']['failing']} of {samples['original']['judged']} / "  # type: ignore[index]
            f"{(samples['min_bad'] or {}).get('failing')}"  # type: ignore[index]
            if samples
            else "-"
        )
        answer = ", ".join(row["answer"]) if isinstance(row["answer"], list) else (row["log_tail"][:60] or "-")
        print(f"| {row['case']} | {row['exit']} | {answer} | {row['checks']} | {row['seconds']} | {failing} |")


if __name__ == "__main__":
    main()

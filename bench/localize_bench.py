"""How many checks the localisation path (issue 3) saves: an fp16 overflow planted in models of
the zoo, reduced with the issue's compare fp32-vs-fp16 spec, with and without localisation.

    python bench/localize_bench.py [--models chain rescnn ...] [--timeout S] [--merge]

Default models: chain, rescnn, transformer, multi_io, dynamic (~1 min on 2 cores); big10k is
opt-in (``--models big10k --merge``, ~2.5 min: two golden runs over 10,000 nodes dominate).

The planted overflow (``plant``): pick an intermediate float tensor ``t`` of the zoo model whose
golden values (``onnx-reducer golden`` on the unplanted model, inputs uniform in [0, 1), seed 1)
reach 0.5 <= max|t| <= 64 (candidates tried nearest the middle of the graph in node order first),
and insert three Muls right after its producer, rewiring every consumer of ``t`` to the last one:

    t -> Mul(x 2^9) <model>/plant/scale_up -> Mul(x 2^9) <model>/plant/overflow
      -> Mul(x 2^-18) <model>/plant/scale_down -> (the former consumers of t)

All three constants are powers of two, so in fp32 the round trip is exact and every downstream
golden value is bit-identical to the unplanted model's; the constants also stay inside the fp16
converter's weight clamp (1e-7 .. 1e4). ``scale_up`` stays in fp16 range (|t| * 512 <= 32768);
``overflow`` does not (|t| * 2^18 > 65504 for |t| > 0.25), so it is the first node whose fp16
output is inf where fp32 is finite: the planted node, the ideal result. A candidate tensor is
kept only if the planted model fails the spec with signature ``mismatch:nonfinite`` (checked
in-process on the unplanted model's golden inputs: the inf must reach a model output, and Tanh,
Sigmoid or Relu on the way squash it), else the next one is tried. On ``chain`` only the tensor
after the last Sigmoid qualifies (every earlier path crosses a Tanh/Sigmoid/Relu).

Then ``onnx-reducer golden`` on the planted model and three reductions with ``--golden``:
localisation on (the default) in mode auto, and ``--no-localize`` in modes auto and bisect.
Results go to ``bench/out/localize.json`` and ``bench/out/localize.md``; the work files (models,
golden files, summaries, logs) to ``bench/out/localize/<model>/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import zoo  # noqa: E402

from checks.build import build_check  # noqa: E402
from checks.golden import GoldenStore  # noqa: E402
from checks.spec import parse_check_spec  # noqa: E402

BIN = Path(sys.executable).parent
OUT = BENCH / "out"
SPEC = """\
kind: compare
reference: {runtime: onnxruntime}
target: {runtime: onnxruntime, precision: fp16}
tolerance: {atol: 0.001, rtol: 0.001}
"""
DEFAULT_MODELS = ("chain", "rescnn", "transformer", "multi_io", "dynamic")
RUNS: list[tuple[str, str, bool]] = [  # (label, mode, localise)
    ("localize-auto", "auto", True),
    ("no-localize-auto", "auto", False),
    ("no-localize-bisect", "bisect", False),
]
UP = 2.0**9  # scale_up and overflow: |t| * 2^18 > 65504 for |t| > 0.25
DOWN = 2.0**-18
T_MIN, T_MAX = 0.5, 64.0  # max|t| range: overflow with margin, scale_up stays < 65504


def tool(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "onnx-reducer"), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def golden(model: Path, out: Path, timeout: float) -> None:
    proc = tool("golden", model.name, "-o", out.name, cwd=model.parent, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"onnx-reducer golden {model} failed:\n{proc.stderr[-2000:]}")


def candidate_tensors(model: onnx.ModelProto, golden_path: Path) -> list[tuple[int, str, float]]:
    """(node index, tensor, max|t|) for float intermediates in range, nearest the middle first."""
    outputs = {o.name for o in model.graph.output}
    store = GoldenStore.open(golden_path)
    found = []
    try:
        for i, node in enumerate(model.graph.node):
            for name in node.output:
                if name in outputs or not store.has(0, name):
                    continue
                value = store.read(0, name)
                if value.dtype != np.float32 or value.size == 0:
                    continue
                peak = float(np.abs(value).max())
                if T_MIN <= peak <= T_MAX:
                    found.append((i, name, peak))
    finally:
        store.close()
    middle = len(model.graph.node) / 2
    return sorted(found, key=lambda c: (abs(c[0] - middle), c[0]))


def plant(model: onnx.ModelProto, index: int, tensor: str, prefix: str) -> tuple[onnx.ModelProto, str]:
    """A copy of ``model`` with scale_up/overflow/scale_down inserted after node ``index``."""
    planted = onnx.ModelProto()
    planted.CopyFrom(model)
    graph = planted.graph
    names = [f"{prefix}/plant/{n}" for n in ("scale_up", "overflow", "scale_down")]
    up, down = f"{prefix}/plant/k_up", f"{prefix}/plant/k_down"
    graph.initializer.extend(
        [numpy_helper.from_array(np.float32([UP]), up), numpy_helper.from_array(np.float32([DOWN]), down)]
    )
    last = f"{names[2]}:0"
    for node in graph.node:
        for j, name in enumerate(node.input):
            if name == tensor:
                node.input[j] = last
    new = [
        helper.make_node("Mul", [tensor, up], [f"{names[0]}:0"], name=names[0]),
        helper.make_node("Mul", [f"{names[0]}:0", up], [f"{names[1]}:0"], name=names[1]),
        helper.make_node("Mul", [f"{names[1]}:0", down], [last], name=names[2]),
    ]
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes[: index + 1], *new, *nodes[index + 1 :]])
    onnx.checker.check_model(planted)
    return planted, names[1]


def prepare(name: str, folder: Path, timeout: float) -> dict[str, Any]:
    """Plant the overflow in zoo model ``name``; write planted.onnx and planted.golden."""
    base_path = folder / "base.onnx"
    shutil.copyfile(zoo.build(name, OUT), base_path)
    golden(base_path, folder / "base.golden", timeout)
    base = onnx.load(str(base_path))
    check = build_check(parse_check_spec(SPEC), golden=folder / "base.golden")  # same inputs as planted
    path = folder / "planted.onnx"
    tried = []
    for index, tensor, peak in candidate_tensors(base, folder / "base.golden"):
        planted, overflow = plant(base, index, tensor, name)
        onnx.save(planted, str(path))
        verdict, _ = check.run(path)
        tried.append(f"{tensor}: {verdict.kind.value} {verdict.signature}".strip())
        if verdict.signature == "mismatch:nonfinite":
            golden(path, folder / "planted.golden", timeout)
            return {
                "model": name,
                "nodes": len(planted.graph.node),
                "base_nodes": len(base.graph.node),
                "tensor": tensor,
                "tensor_max_abs": round(peak, 3),
                "after_node": base.graph.node[index].name,
                "planted_node": overflow,
                "tried": tried,
            }
    raise RuntimeError(f"{name}: no tensor gives an fp16 overflow that reaches an output ({tried})")


def reduce_run(folder: Path, label: str, mode: str, localise: bool, timeout: float) -> dict[str, Any]:
    run_dir = folder / label
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    args = ["reduce", "../planted.onnx", "-o", "min_bad.onnx", "--check-spec", "../spec.yaml"]
    args += ["--golden", "../planted.golden", "--summary-json", "summary.json", "--mode", mode, "--no-progress"]
    if not localise:
        args.append("--no-localize")
    started = time.monotonic()
    try:
        proc = tool(*args, cwd=run_dir, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"run": label, "status": f"timeout after {timeout:.0f} s"}
    wall = time.monotonic() - started
    (run_dir / "reduce.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not (run_dir / "summary.json").exists():
        return {"run": label, "status": f"exit {proc.returncode}", "wall_s": round(wall, 2)}
    summary = json.loads((run_dir / "summary.json").read_text())
    final = [n.name for n in onnx.load(str(run_dir / "min_bad.onnx")).graph.node]
    loc = summary.get("localization") or {}
    return {
        "run": label,
        "status": "ok",
        "checks": summary["checks_run"],
        "nodes_after": len(final),
        "final_nodes": final,
        "original_signature": summary["original"].get("signature"),
        "localization_path": loc.get("path"),
        "localization_reason": loc.get("reason"),
        "localization_checks": loc.get("checks"),
        "wall_s": round(wall, 2),
        "elapsed_s": round(summary["elapsed_s"], 2),
        "check_time_s": round(summary["check_time_s"], 2),
    }


def bench_model(name: str, timeout: float) -> dict[str, Any]:
    folder = OUT / "localize" / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "spec.yaml").write_text(SPEC)
    started = time.monotonic()
    row = prepare(name, folder, timeout)
    row["prepare_s"] = round(time.monotonic() - started, 2)
    row["runs"] = {}
    for label, mode, localise in RUNS:
        run = reduce_run(folder, label, mode, localise, timeout)
        run["exact"] = run.get("final_nodes") == [row["planted_node"]]
        row["runs"][label] = run
        print(f"  {label}: {_brief(run)}", flush=True)
    return row


def _brief(run: dict[str, Any]) -> str:
    if run["status"] != "ok":
        return run["status"]
    return (
        f"{run['checks']} checks, {run['nodes_after']} node(s) {run['final_nodes'][:3]}, "
        f"path={run['localization_path']}, {run['wall_s']} s"
    )


def _cell(run: dict[str, Any], key: str) -> str:
    if run.get("status") != "ok":
        return run.get("status", "-")
    value = run[key]
    return "yes" if value is True else "no" if value is False else str(value)


def markdown(rows: list[dict[str, Any]]) -> str:
    head = [
        "| model | nodes | planted node (after) | checks: localised auto | no-localize auto | no-localize bisect "
        "| final nodes (loc / auto / bisect) | exactly the planted node (loc / auto / bisect) | path (localised) "
        "| wall s (loc / auto / bisect) |",
        "|---|---:|---|---:|---:|---:|:---:|:---:|---|---:|",
    ]
    lines = []
    for row in rows:
        runs = [row["runs"][label] for label, _, _ in RUNS]
        loc, auto, bisect = runs
        lines.append(
            f"| {row['model']} | {row['nodes']} | `{row['planted_node'].split('/', 1)[1]}` "
            f"(`{row['after_node'].split('/', 1)[1]}`) "
            f"| {_cell(loc, 'checks')} | {_cell(auto, 'checks')} | {_cell(bisect, 'checks')} "
            f"| {' / '.join(_cell(r, 'nodes_after') for r in runs)} "
            f"| {' / '.join(_cell(r, 'exact') for r in runs)} "
            f"| {_cell(loc, 'localization_path')} "
            f"| {' / '.join(_cell(r, 'wall_s') for r in runs)} |"
        )
    ok = [r for r in rows if all(r["runs"][label].get("status") == "ok" for label, _, _ in RUNS)]
    if ok:
        c = {label: sum(r["runs"][label]["checks"] for r in ok) for label, _, _ in RUNS}
        w = {label: sum(r["runs"][label]["wall_s"] for r in ok) for label, _, _ in RUNS}
        lines.append(
            f"| **total** ({len(ok)} models) | | | **{c['localize-auto']}** | **{c['no-localize-auto']}** "
            f"| **{c['no-localize-bisect']}** | | | | **{w['localize-auto']:.1f} / {w['no-localize-auto']:.1f} "
            f"/ {w['no-localize-bisect']:.1f}** |"
        )
    return "\n".join(head + lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=list(zoo.ALL_MODELS))
    parser.add_argument("--timeout", type=float, default=300.0, help="per golden/reduce run (s)")
    parser.add_argument("--merge", action="store_true", help="keep the other models' rows of localize.json")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    rows, failed = [], []
    for name in args.models:
        print(f"{name}:", flush=True)
        try:
            rows.append(bench_model(name, args.timeout))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"  skipped: {exc}", flush=True)
            failed.append({"model": name, "error": str(exc)})
    if args.merge and (OUT / "localize.json").exists():
        kept = json.loads((OUT / "localize.json").read_text())["models"]
        rows += [r for r in kept if r["model"] not in args.models]
        rows.sort(key=lambda r: zoo.ALL_MODELS.index(r["model"]))
    result = {"spec": SPEC, "runs": [r[0] for r in RUNS], "models": rows, "failed": failed}
    result["total_s"] = round(time.monotonic() - started, 1)
    (OUT / "localize.json").write_text(json.dumps(result, indent=1))
    table = markdown(rows)
    (OUT / "localize.md").write_text(table)
    print(table)
    print(f"Wrote {OUT / 'localize.json'} and {OUT / 'localize.md'} in {result['total_s']} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

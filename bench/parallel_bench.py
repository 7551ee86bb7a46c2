"""Parallel checks on the command line (issue 9): ``onnx-reducer reduce --jobs K`` for K = 1, 2, 4, 8.

    python bench/parallel_bench.py [--sleep 0.5] [--slots 1 2 4 8] [--only NAME ...] [--mode auto]
    python bench/parallel_bench.py --overhead [--slots 1 4]     # per-iteration overhead, 10k nodes

Every check sleeps a fixed time (``BENCH_CHECK_SLEEP``, default 0.5 s: an engine build) before it
answers, so slot parallelism is measured without needing idle cores (the bench machine's two
cores are shared). Cases: the zoo's single culprits, pairs and large answers (``CASES``), and one
with ``--reduce-data`` whose failure needs a size of at least 13 (``DATA_CASES``, ``--only data``). For
each case and K: wall time of the whole command, the reduction's own time (``elapsed_s`` of
``--summary-json``), checks run (and started: speculative ones still running at the end are
killed, not counted), the answer (its nodes and bytes must equal the one-slot answer's). Ratios are against one
slot; "ideal" is bisection with K parallel probes, 1/log2(K+1). "rounds" is the reduction's time
in units of its mean check time (``elapsed_s`` / mean check duration): what the ratio would be if
a check took as long with K running at once as alone (on a machine with spare cores). Results go to
``bench/out/parallel/results.json`` and ``results.md``.

``--overhead``: the driver's own time per iteration (``overhead_s`` of ``--summary-json``: writing
the candidate into the slot, the hand-offs; the check excluded) on the 10k-node models, with
checks that do not sleep: it must not grow with model size or weights. Results in
``bench/out/parallel/overhead.json`` and ``overhead.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH / "checks"))

import zoo  # noqa: E402
from _common import graph_nodes  # noqa: E402
from failures import FAILURES, Failure, node  # noqa: E402

BIN = Path(sys.executable).parent
ITER_ARTIFACT = "polygraphy_debug.onnx"


def _failure(model: str, name: str) -> Failure:
    return next(f for f in FAILURES[model] if f.name == name)


CASES: list[tuple[str, str, Failure]] = [
    ("single", "chain200", node("chain200/100_sub")),
    ("single", "chain200", node("chain200/7_neg")),
    ("single", "residual", node("residual/b20/tanh")),
    ("single", "chain", _failure("chain", "node:26_mul")),
    ("single", "rescnn", _failure("rescnn", "node:b2/relu1")),
    ("single", "transformer", _failure("transformer", "node:b1/concat")),
    ("pair", "chain", _failure("chain", "pair:9_relu+30_abs")),
    ("pair", "rescnn", _failure("rescnn", "pair:b1/conv1+b4/add")),
    ("pair", "multi_io", _failure("multi_io", "pair:a_mul+b_add")),
    ("large", "residual", _failure("residual", "reach:b5/mm->b34/add")),
    ("large", "chain200", _failure("chain200", "reach:70_abs->129_relu")),
]

DATA_CASES: list[tuple[str, str, Failure]] = [
    (
        "data",
        "chain200",
        Failure(
            "sized:100_sub>=13",
            "data",
            "sized_node_present.py",
            ("--node", "chain200/100_sub", "--min-size", "13"),
            1,
            "the node with a size of at least 13: --reduce-data searches the hidden size 32 down to 13",
        ),
    ),
]
"""Run with ``--reduce-data`` (the data step's sizes, checked ahead with spare slots)."""

OVERHEAD_CASES: list[tuple[str, str, Failure]] = [
    ("overhead", "big10k", _failure("big10k", "node:1500/mul")),
    ("overhead", "big10k_1g", _failure("big10k_1g", "node:1500/mul")),
]


@dataclass
class Run:
    kind: str
    model: str
    failure: str
    slots: int
    status: str = "ok"
    wall_s: float = 0.0
    elapsed_s: float = 0.0
    checks_run: int = 0
    checks_started: int = 0
    speculative: int = 0
    nodes: list[str] | None = None
    answer_sha256: str = ""
    mean_check_s: float = 0.0
    overhead_mean_s: float = 0.0
    overhead_median_s: float = 0.0
    overhead_max_s: float = 0.0


def execute(kind: str, model: str, failure: Failure, slots: int, args: argparse.Namespace, sleep: float) -> Run:
    workdir = args.out / "runs" / model / failure.name.replace("/", "_").replace(":", "_") / f"jobs{slots}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    log = workdir / "checks.log"
    env = dict(os.environ, BENCH_CHECK_LOG=str(log), BENCH_CHECK_SLEEP=str(sleep))
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    path = zoo.build(model, args.out)
    argv = [str(BIN / "onnx-reducer"), "reduce", str(path), "-o", "reduced.onnx", "--mode", args.mode]
    argv += ["--fail-regex", "BENCH-FAIL", "--summary-json", "summary.json", "-q", "--jobs", str(slots)]
    argv += ["--reduce-data"] if kind == "data" else []
    argv += ["--check", *failure.command(ITER_ARTIFACT, None, None)]
    run = Run(kind, model, failure.name, slots)
    started = time.monotonic()
    with open(workdir / "tool.log", "w") as out:
        proc = subprocess.run(argv, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    run.wall_s = time.monotonic() - started
    if proc.returncode != 0:
        run.status = f"error (exit {proc.returncode})"
        return run
    summary = json.loads((workdir / "summary.json").read_text())
    run.elapsed_s = summary["elapsed_s"]
    run.checks_run = summary["checks_run"]
    run.speculative = summary["speculative_checks"]
    durations = [float(json.loads(line)["duration_s"]) for line in log.read_text().splitlines()]
    run.checks_started = len(durations)
    run.mean_check_s = statistics.mean(durations) if durations else 0.0
    run.nodes = sorted(name for name, _ in graph_nodes(str(workdir / "reduced.onnx")))
    run.answer_sha256 = hashlib.sha256((workdir / "reduced.onnx").read_bytes()).hexdigest()
    overheads = [float(i["overhead_s"]) for i in summary["iterations"] if not i["cached"]]
    if overheads:
        run.overhead_mean_s = statistics.mean(overheads)
        run.overhead_median_s = statistics.median(overheads)
        run.overhead_max_s = max(overheads)
    for leftover in workdir.glob("*.weights"):
        leftover.unlink()
    return run


def ideal(slots: int) -> float:
    """Bisection with ``slots`` parallel probes: log2(slots + 1) times fewer rounds."""
    return 1.0 / math.log2(slots + 1)


def rows(runs: list[Run]) -> list[dict[str, object]]:
    table: list[dict[str, object]] = []
    for run in runs:
        base = next(r for r in runs if (r.model, r.failure, r.slots) == (run.model, run.failure, 1))
        table.append(
            {
                **asdict(run),
                "wall_ratio": run.wall_s / base.wall_s,
                "elapsed_ratio": run.elapsed_s / base.elapsed_s if base.elapsed_s else None,
                "rounds_ratio": _rounds(run) / _rounds(base) if _rounds(base) else None,
                "ideal": ideal(run.slots),
                "checks_ratio": run.checks_run / base.checks_run if base.checks_run else None,
                "same_answer": run.nodes == base.nodes and run.answer_sha256 == base.answer_sha256,
            }
        )
    return table


def _rounds(run: Run) -> float:
    return run.elapsed_s / run.mean_check_s if run.mean_check_s else 0.0


def markdown(table: list[dict[str, object]]) -> str:
    lines = [
        "| case | model | failure | slots | checks run (started) | ahead | wall s | wall ratio | reduction ratio "
        "| rounds ratio | ideal | checks ratio | same answer |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in table:
        lines.append(
            f"| {r['kind']} | {r['model']} | {r['failure']} | {r['slots']} | {r['checks_run']} ({r['checks_started']}) "
            f"| {r['speculative']} | {float(str(r['wall_s'])):.1f} | {float(str(r['wall_ratio'])):.2f} "
            f"| {_ratio(r['elapsed_ratio'])} | {_ratio(r['rounds_ratio'])} | {float(str(r['ideal'])):.2f} "
            f"| {_ratio(r['checks_ratio'])} "
            f"| {'yes' if r['same_answer'] else '**no**'} |"
        )
    return "\n".join(lines)


def _ratio(value: object) -> str:
    return "-" if value is None else f"{float(str(value)):.2f}"


def summary_by_kind(table: list[dict[str, object]]) -> str:
    """Mean ratios per case kind and slot count (geometric means over cases)."""
    lines = [
        "| case kind | slots | mean wall ratio | mean reduction ratio | mean rounds ratio | ideal "
        "| mean checks ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    kinds = sorted({str(r["kind"]) for r in table}, key=["single", "pair", "large", "data"].index)
    for kind in kinds:
        for slots in sorted({int(str(r["slots"])) for r in table}):
            chosen = [r for r in table if r["kind"] == kind and r["slots"] == slots and r["status"] == "ok"]
            if not chosen:
                continue
            wall = _geomean([float(str(r["wall_ratio"])) for r in chosen])
            reduction = _geomean([float(str(r["elapsed_ratio"])) for r in chosen])
            rounds = _geomean([float(str(r["rounds_ratio"])) for r in chosen])
            checks = _geomean([float(str(r["checks_ratio"])) for r in chosen])
            ratios = f"{wall:.2f} | {reduction:.2f} | {rounds:.2f} | {ideal(slots):.2f} | {checks:.2f}"
            lines.append(f"| {kind} | {slots} | {ratios} |")
    return "\n".join(lines)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def overhead_markdown(runs: list[Run]) -> str:
    lines = [
        "| model | slots | checks | wall s | overhead/iter mean s | median s | max s | same answer |",
        "|---|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for run in runs:
        base = next(r for r in runs if (r.model, r.slots) == (run.model, 1))
        same = "yes" if run.nodes == base.nodes else "**no**"
        lines.append(
            f"| {run.model} | {run.slots} | {run.checks_run} | {run.wall_s:.1f} | {run.overhead_mean_s:.3f} "
            f"| {run.overhead_median_s:.3f} | {run.overhead_max_s:.3f} | {same} |"
        )
    return "\n".join(lines)


def run_overhead(args: argparse.Namespace, slots: list[int]) -> None:
    runs = []
    for kind, model, failure in OVERHEAD_CASES:
        if args.only and not any(o in model for o in args.only):
            continue
        for k in slots:
            run = execute(kind, model, failure, k, args, sleep=0.0)
            runs.append(run)
            print(f"{model:<10} jobs={k}: {run.status} {run.wall_s:6.1f}s checks {run.checks_run} "
                  f"overhead mean {run.overhead_mean_s:.3f}s median {run.overhead_median_s:.3f}s")  # fmt: skip
    folder = args.out / "parallel"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "overhead.json").write_text(json.dumps([asdict(r) for r in runs], indent=1))
    text = overhead_markdown(runs) + "\n"
    (folder / "overhead.md").write_text(text)
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sleep", type=float, default=0.5, help="Seconds every check sleeps (default 0.5).")
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--mode", default="auto")
    parser.add_argument("--only", nargs="+", default=None, help="Cases whose model or failure contains one of these.")
    parser.add_argument("--out", type=Path, default=BENCH / "out")
    parser.add_argument("--overhead", action="store_true", help="Per-iteration overhead on the 10k-node models.")
    parser.add_argument("--report", action="store_true", help="Only rebuild results.md from results.json.")
    args = parser.parse_args()
    args.out = args.out.resolve()
    slots = sorted(set(args.slots) | {1})
    if args.overhead:
        run_overhead(args, slots)
        return
    if args.report:
        saved = json.loads((args.out / "parallel" / "results.json").read_text())["runs"]
        write_results(args, [Run(**{f: r[f] for f in Run.__dataclass_fields__ if f in r}) for r in saved])
        return
    runs: list[Run] = []
    for kind, model, failure in CASES + DATA_CASES:
        if args.only and not any(o in model or o in failure.name or o == kind for o in args.only):
            continue
        for k in slots:
            run = execute(kind, model, failure, k, args, args.sleep)
            runs.append(run)
            counts = f"checks {run.checks_run} (started {run.checks_started}, ahead {run.speculative})"
            print(f"{kind:<7} {model:<12} {failure.name:<28} jobs={k}: {run.status} {run.wall_s:6.1f}s {counts}")
    write_results(args, runs)


def write_results(args: argparse.Namespace, runs: list[Run]) -> None:
    table = rows(runs)
    folder = args.out / "parallel"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(
        json.dumps({"sleep_s": args.sleep, "mode": args.mode, "runs": table}, indent=1)
    )
    text = f"{markdown(table)}\n\n{summary_by_kind(table)}\n"
    (folder / "results.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

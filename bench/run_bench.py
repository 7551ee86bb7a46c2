"""Run onnx-reducer and Polygraphy side by side on the model zoo with planted failures.

    python bench/run_bench.py [--quick] [--only NAME ...] [--runs TOOL/MODE ...] [--timeout S] [--no-polygraphy]

For every (model, failure) pair: onnx-reducer in modes auto, bisect, linear, minimize, and
``polygraphy debug reduce`` in modes bisect, linear and bisect-then-linear (the bisect result
reduced again with linear, as Polygraphy's guide recommends). Linear modes are skipped on the
10k-node models (O(N) checks). Each run gets a fresh folder under ``bench/out/runs``; every
check appends a line to ``checks.log`` there, so checks and check time are counted the same way
for both tools. Results go to ``bench/out/results.json`` and ``bench/out/results.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import onnx

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH / "checks"))

import zoo  # noqa: E402
from _common import graph_nodes  # noqa: E402
from failures import FAILURES, Failure, flaky_salts, write_golden  # noqa: E402

BIN = Path(sys.executable).parent
RUNS: list[tuple[str, str]] = [
    ("onnx-reducer", "auto"),
    ("onnx-reducer", "auto+noconfirm"),
    ("onnx-reducer", "auto+data"),
    ("onnx-reducer", "bisect"),
    ("onnx-reducer", "linear"),
    ("onnx-reducer", "minimize"),
    ("polygraphy", "bisect"),
    ("polygraphy", "linear"),
    ("polygraphy", "bisect+linear"),
]
BIG_MODELS = ("big10k", "big10k_1g")
QUICK: dict[str, tuple[str, ...]] = {
    "chain": ("node:26_mul", "numeric:34_mul", "flaky:17_relu"),
    "multi_io": ("pair:a_mul+b_add",),
    "big10k": ("node:1500/mul",),
}
ITER_ARTIFACT = "polygraphy_debug.onnx"
LINEAR_LIMIT = 200  # bisect-then-linear on a 10k-node model: skip the linear step above this size


@dataclass
class Run:
    model: str
    failure: str
    tool: str
    mode: str
    status: str = "ok"  # ok / timeout / error / skipped: ...
    checks: int = 0
    check_time_s: float = 0.0
    wall_s: float = 0.0
    nodes: int | None = None
    expected: int | None = None
    still_fails: bool | None = None
    internal_overhead_s: float | None = None  # onnx-reducer's own per-iteration figure
    fails_percent: int | None = None  # onnx-reducer's estimate when it found the check flaky

    @property
    def overhead_s(self) -> float | None:
        """(wall time - total check time) / checks: the tool's cost per iteration."""
        return (self.wall_s - self.check_time_s) / self.checks if self.checks else None


@dataclass
class Case:
    model: str
    model_path: Path
    failure: Failure
    golden: Path | None
    inputs: Path | None
    salt: str | None
    salt_count: int = 1

    def check(self, model_arg: str) -> list[str]:
        return self.failure.command(model_arg, self.golden, self.salt)

    @property
    def name(self) -> str:
        """The failure's name; a flaky one run with several salts (``--salts``) gets ``@salt``."""
        several = self.salt is not None and self.salt_count > 1
        return f"{self.failure.name}@{self.salt}" if several else self.failure.name


def deep_nodes(path: Path) -> int:
    """Nodes in and out of Loop/If bodies (the control-flow cases count what bodies keep)."""

    def count(graph: onnx.GraphProto) -> int:
        return sum(1 + sum(count(attr.g) for attr in node.attribute if attr.HasField("g")) for node in graph.node)

    return count(onnx.load(str(path), load_external_data=False).graph)


def read_log(path: Path) -> tuple[int, float]:
    if not path.exists():
        return 0, 0.0
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return len(lines), sum(float(line["duration_s"]) for line in lines)


FLAKY_TRIES = 10  # a flaky failure "still fails" when one of this many fresh draws fails


def still_fails(case: Case, model: Path) -> bool:
    env = {k: v for k, v in os.environ.items() if k != "BENCH_CHECK_LOG"}
    tries = 1
    if case.failure.kind == "flaky":  # fresh draws: a private log counts the repeats (checks/flaky.py)
        env["BENCH_CHECK_LOG"] = str(model.parent / "still_fails.log")
        tries = FLAKY_TRIES
    for _ in range(tries):
        proc = subprocess.run(case.check(str(model)), capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0 and "BENCH-FAIL" in proc.stdout:
            return True
    return False


def tool_argv(case: Case, tool: str, mode: str, model: Path) -> list[str]:
    common = ["-o", "reduced.onnx", "--mode", mode, "--fail-regex", "BENCH-FAIL"]
    if case.inputs is not None:
        common += ["--load-inputs", str(case.inputs)]
    if tool == "onnx-reducer":
        head = [str(BIN / "onnx-reducer"), "reduce", str(model), *common, "--summary-json", "summary.json", "-q"]
        if mode == "auto+noconfirm":  # auto with --no-confirm-flaky: what the default confirmation costs
            head[head.index("auto+noconfirm")] = "auto"
            head.append("--no-confirm-flaky")
        if mode == "auto+data":  # auto with --reduce-data: what the opt-in data step costs
            head[head.index("auto+data")] = "auto"
            head.append("--reduce-data")
    else:
        head = [str(BIN / "polygraphy"), "debug", "reduce", str(model), *common]
    return [*head, "--check", *case.check(ITER_ARTIFACT)]


def execute(case: Case, tool: str, mode: str, model: Path, workdir: Path, timeout: float) -> Run:
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    log = workdir / "checks.log"
    env = dict(os.environ, BENCH_CHECK_LOG=str(log), PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    run = Run(case.model, case.name, tool, mode, expected=case.failure.expected)
    started = time.monotonic()
    with open(workdir / "tool.log", "w") as out:
        try:
            proc = subprocess.run(
                tool_argv(case, tool, mode, model),
                cwd=workdir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
            run.status = "ok" if proc.returncode == 0 else f"error (exit {proc.returncode})"
        except subprocess.TimeoutExpired:
            run.status = f"timeout ({timeout:.0f}s)"
    run.wall_s = time.monotonic() - started
    run.checks, run.check_time_s = read_log(log)
    reduced = workdir / "reduced.onnx"
    if run.status == "ok" and reduced.exists():
        run.nodes = deep_nodes(reduced) if case.failure.kind == "body" else len(graph_nodes(str(reduced)))
        run.still_fails = still_fails(case, reduced)
    summary = workdir / "summary.json"
    if summary.exists():
        saved = json.loads(summary.read_text())
        run.fails_percent = (saved.get("flaky") or {}).get("fails_percent")
        iterations = [i for i in saved["iterations"] if not i["cached"]]
        if iterations:
            run.internal_overhead_s = sum(i["overhead_s"] for i in iterations) / len(iterations)
    for leftover in workdir.glob("*.weights"):
        leftover.unlink()
    return run


def combine(first: Run, second: Run) -> Run:
    """Polygraphy's bisect-then-linear: the linear run started from the bisect result."""
    run = Run(first.model, first.failure, "polygraphy", "bisect+linear", expected=first.expected)
    run.status = second.status
    run.checks = first.checks + second.checks
    run.check_time_s = first.check_time_s + second.check_time_s
    run.wall_s = first.wall_s + second.wall_s
    run.nodes, run.still_fails = second.nodes, second.still_fails
    return run


def skip_reason(model: str, tool: str, mode: str, args: argparse.Namespace) -> str | None:
    if tool == "polygraphy" and args.no_polygraphy:
        return "skipped: --no-polygraphy"
    if args.runs and f"{tool}/{mode}" not in args.runs:
        needed = tool == "polygraphy" and mode == "bisect" and "polygraphy/bisect+linear" in args.runs
        if not needed:
            return "skipped: not in --runs"
    if mode == "auto+noconfirm" and not args.confirm:
        return "skipped: without --confirm"
    if mode == "auto+data" and not args.reduce_data:
        return "skipped: without --reduce-data"
    if mode == "linear" and model in BIG_MODELS:
        return "skipped: too slow (O(N) checks)"
    if model in BIG_MODELS and tool == "onnx-reducer" and mode != "auto" and args.quick:
        return "skipped: --quick"
    if model in BIG_MODELS and tool == "polygraphy" and args.quick:
        return "skipped: --quick (~100 s per run)"
    return None


def run_case(case: Case, args: argparse.Namespace) -> list[Run]:
    runs: list[Run] = []
    by_mode: dict[tuple[str, str], Run] = {}
    folder = args.out / "runs" / case.model / case.name.replace("/", "_").replace(":", "_").replace("@", "_s")
    for tool, mode in RUNS:
        reason = skip_reason(case.model, tool, mode, args)
        if reason:
            runs.append(Run(case.model, case.name, tool, mode, status=reason, expected=case.failure.expected))
            continue
        workdir = folder / f"{tool}-{mode}"
        if mode == "bisect+linear":
            first = by_mode.get((tool, "bisect"))
            if first is None or first.status != "ok":
                runs.append(Run(case.model, case.name, tool, mode, status="n/a: bisect did not finish"))
                continue
            if case.model in BIG_MODELS and (first.nodes or 0) > LINEAR_LIMIT:
                status = f"skipped: linear on the {first.nodes}-node bisect result is O(N) checks"
                runs.append(Run(case.model, case.name, tool, mode, status=status))
                continue
            second = execute(case, tool, "linear", folder / f"{tool}-bisect" / "reduced.onnx", workdir, args.timeout)
            run = combine(first, second)
        else:
            run = execute(case, tool, mode, case.model_path, workdir, args.timeout)
        by_mode[(tool, mode)] = run
        runs.append(run)
        print(
            f"  {tool:12s} {mode:14s} {run.status:10s} checks={run.checks:4d} nodes={run.nodes} "
            f"fails={run.still_fails} wall={run.wall_s:7.1f}s overhead/iter={_fmt(run.overhead_s, 3)}s"
            + (f" flaky ~{run.fails_percent}%" if run.fails_percent is not None else ""),
            flush=True,
        )
    return runs


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def selected(model: str, failure: Failure, args: argparse.Namespace) -> bool:
    if args.quick and failure.name not in QUICK.get(model, ()):
        return False
    if not args.only:
        return True
    return any(o == model or o in failure.name or o == f"{model}/{failure.name}" for o in args.only)


def build_cases(args: argparse.Namespace) -> list[Case]:
    cases = []
    for model, failures in FAILURES.items():
        for failure in failures:
            if not selected(model, failure, args):
                continue
            path = zoo.build(model, args.out)
            golden = inputs = None
            if failure.needs_golden:
                golden, inputs = write_golden(path, path.parent)
            if failure.kind != "flaky":
                cases.append(Case(model, path, failure, golden, inputs, None))
                continue
            for salt in flaky_salts(failure, path, args.salts):
                cases.append(Case(model, path, failure, golden, inputs, salt, args.salts))
    return cases


def markdown(runs: list[Run]) -> str:
    lines = [
        "| model | failure | tool | mode | checks | nodes (ideal) | still fails | wall s | check s | overhead/iter s |",
        "|---|---|---|---|---:|---:|:---:|---:|---:|---:|",
    ]
    for r in runs:
        if r.status != "ok":
            lines.append(f"| {r.model} | {r.failure} | {r.tool} | {r.mode} | {r.status} | | | | | |")
            continue
        fails = {True: "yes", False: "**no**", None: "-"}[r.still_fails]
        lines.append(
            f"| {r.model} | {r.failure} | {r.tool} | {r.mode} | {r.checks} | {r.nodes} ({r.expected}) | {fails} "
            f"| {r.wall_s:.1f} | {r.check_time_s:.1f} | {_fmt(r.overhead_s, 3)} |"
        )
    return "\n".join(lines) + "\n"


def targets(runs: list[Run]) -> dict[str, Any]:
    """The issue's targets, evaluated per (model, failure) pair."""
    pairs: dict[tuple[str, str], dict[str, Run]] = {}
    for r in runs:
        if r.status == "ok":
            pairs.setdefault((r.model, r.failure), {})[f"{r.tool}/{r.mode}"] = r
    size, checks = [], []
    for (model, failure), modes in pairs.items():
        pg = [r for k, r in modes.items() if k.startswith("polygraphy/") and r.nodes is not None]
        auto = modes.get("onnx-reducer/auto")
        if pg and auto is not None and auto.nodes is not None:
            best = min(r.nodes for r in pg if r.nodes is not None)
            size.append(
                {"pair": f"{model}/{failure}", "auto": auto.nodes, "polygraphy_best": best, "met": auto.nodes <= best}
            )
        bl = modes.get("polygraphy/bisect+linear")
        if bl is not None and auto is not None:
            checks.append(
                {
                    "pair": f"{model}/{failure}",
                    "auto": auto.checks,
                    "polygraphy_bisect_linear": bl.checks,
                    "met": auto.checks <= bl.checks,
                }
            )
    overhead = []
    for (model, failure), modes in pairs.items():
        auto, pgb = modes.get("onnx-reducer/auto"), modes.get("polygraphy/bisect")
        if model in BIG_MODELS and auto and pgb and auto.overhead_s and pgb.overhead_s:
            overhead.append(
                {
                    "pair": f"{model}/{failure}",
                    "auto": auto.overhead_s,
                    "polygraphy_bisect": pgb.overhead_s,
                    "ratio": pgb.overhead_s / auto.overhead_s,
                    "met": pgb.overhead_s >= 5 * auto.overhead_s,
                }
            )
    return {"size": size, "checks": checks, "overhead": overhead}


def targets_markdown(result: dict[str, Any]) -> str:
    lines = []
    for key, title in (
        ("size", "auto's final model no larger than Polygraphy's best mode"),
        ("checks", "auto's checks <= Polygraphy bisect-then-linear"),
        ("overhead", "10k-node overhead/iter: Polygraphy bisect >= 5x auto"),
    ):
        rows = result[key]
        met = sum(r["met"] for r in rows)
        lines.append(f"- {title}: met in {met}/{len(rows)} pairs")
        lines += [f"  - missed: {r}" for r in rows if not r["met"]]
        if key == "overhead":
            lines += [
                f"  - {r['pair']}: auto {r['auto']:.3f}s, Polygraphy {r['polygraphy_bisect']:.3f}s, {r['ratio']:.0f}x"
                for r in rows
            ]
    return "\n".join(lines) + "\n"


def merged(path: Path, new: list[Run]) -> list[Run]:
    """Earlier results with the pairs of ``new`` replaced, in the zoo's order."""
    fresh = {(r.model, r.failure) for r in new}
    old = [] if not path.exists() else json.loads(path.read_text())["runs"]
    kept = [Run(**{k: v for k, v in r.items() if k != "overhead_s"}) for r in old]
    runs = [r for r in kept if (r.model, r.failure) not in fresh] + new
    order = {(m, f.name): i for i, (m, f) in enumerate((m, f) for m, fs in FAILURES.items() for f in fs)}
    tools = {key: i for i, key in enumerate(RUNS)}

    def key(r: Run) -> tuple[int, str, int]:
        name, _, salt = r.failure.partition("@")
        return order.get((r.model, name), 999), salt, tools.get((r.tool, r.mode), 99)

    return sorted(runs, key=key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small subset (a few minutes)")
    parser.add_argument("--only", nargs="+", default=[], help="model names or failure-name substrings")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per reducer run")
    parser.add_argument("--no-polygraphy", action="store_true")
    parser.add_argument(
        "--runs",
        nargs="+",
        default=[],
        metavar="TOOL/MODE",
        help="only these runs, e.g. onnx-reducer/auto polygraphy/bisect+linear (default: all)",
    )
    parser.add_argument("--merge", action="store_true", help="replace only these pairs in an existing results.json")
    parser.add_argument(
        "--salts", type=int, default=1, help="run each flaky failure with this many salts (independent draws)"
    )
    parser.add_argument(
        "--confirm",
        action="store_true",
        help="also run onnx-reducer auto with --no-confirm-flaky (the cost of confirming 2-3-node answers)",
    )
    parser.add_argument(
        "--reduce-data",
        action="store_true",
        help="also run onnx-reducer auto with --reduce-data (the cost of the opt-in data step)",
    )
    parser.add_argument("--out", type=Path, default=BENCH / "out")
    args = parser.parse_args()
    args.out = args.out.resolve()
    started = time.monotonic()
    runs: list[Run] = []
    for case in build_cases(args):
        print(f"{case.model} / {case.name}", flush=True)
        runs += run_case(case, args)
    if args.merge:
        runs = merged(args.out / "results.json", runs)
    result = targets(runs)
    (args.out / "results.json").write_text(
        json.dumps({"runs": [asdict(r) | {"overhead_s": r.overhead_s} for r in runs], "targets": result}, indent=1)
    )
    text = markdown(runs) + "\nTargets:\n\n" + targets_markdown(result)
    (args.out / "results.md").write_text(text)
    print(text)
    print(f"total {time.monotonic() - started:.0f}s; results in {args.out / 'results.md'}")


if __name__ == "__main__":
    main()

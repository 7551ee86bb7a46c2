"""Flaky originals (issue 26 item 3): the bench's 70 %-flaky cases under the first N salts, all of
them, not only those whose full model fails its first check (``failures.flaky_salts`` keeps only
those, so that Polygraphy can run them too).

    python bench/flaky_original_bench.py [--seeds 10] [--only chain ...] [--timeout 600]

Each (model, salt) runs ``onnx-reducer reduce --mode auto`` with the bench's check
(``checks/flaky.py``: a node set's first check draws the per-node-set coin, a repeat a fresh one),
in a fresh folder under ``bench/out/flaky_original``. A run "gives up" when it exits with the
original's refusal ("the original model did not fail"); it "ends at the optimum" when the final
model is the one culprit node and still fails (one of 10 fresh draws). Results:
``bench/out/flaky_original/results.md`` and ``results.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH / "checks"))

import zoo  # noqa: E402
from _common import graph_nodes  # noqa: E402
from failures import FAILURES  # noqa: E402
from flaky import coin  # noqa: E402
from run_bench import Case, execute  # noqa: E402


@dataclass
class Outcome:
    model: str
    salt: str
    original_first: str  # the original's first verdict, by the per-node-set coin: fail / pass
    original_runs: int  # checks of the original the run made
    status: str
    gave_up: bool
    checks: int
    nodes: int | None
    still_fails: bool | None
    fails_percent: int | None

    @property
    def optimum(self) -> bool:
        return self.status == "ok" and self.nodes == 1 and bool(self.still_fails)


def run(model: str, salt: str, out: Path, timeout: float) -> Outcome:
    (failure,) = [f for f in FAILURES[model] if f.kind == "flaky"]
    path = zoo.build(model, out)
    names = [n for n, _ in graph_nodes(str(path))]
    p = float(failure.args[failure.args.index("--p") + 1])
    case = Case(model, path, failure, None, None, salt, 2)
    workdir = out / "runs" / f"{model}@{salt}"
    result = execute(case, "onnx-reducer", "auto", path, workdir, timeout)
    log = (workdir / "tool.log").read_text(errors="replace")
    summary_path = workdir / "summary.json"
    originals = 0
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        originals = sum(1 for i in summary["iterations"] if i["phase"] == "original")
    elif "original model did not fail" in log:  # refused: no summary, every check was the original's
        originals = result.checks
    return Outcome(
        model,
        salt,
        "fail" if coin(salt, names) < p else "pass",
        originals,
        result.status,
        "original model did not fail" in log,
        result.checks,
        result.nodes,
        result.still_fails,
        result.fails_percent,
    )


def markdown(outcomes: list[Outcome]) -> str:
    lines = [
        "| model | salt | original's first check | runs of the original | status | checks | nodes | still fails "
        "| rate |",
        "|---|---:|---|---:|---|---:|---:|:---:|---:|",
    ]
    for o in outcomes:
        status = "gave up: the original did not fail" if o.gave_up else o.status
        rate = f"~{o.fails_percent} %" if o.fails_percent is not None else "-"
        fails = {True: "yes", False: "**no**", None: "-"}[o.still_fails]
        lines.append(
            f"| {o.model} | {o.salt} | {o.original_first} | {o.original_runs} | {status} | {o.checks} "
            f"| {o.nodes if o.nodes is not None else '-'} | {fails} | {rate} |"
        )
    passed_first = [o for o in outcomes if o.original_first == "pass"]
    lines += [
        "",
        f"- runs: {len(outcomes)}; at the optimum (1 node, still fails): {sum(o.optimum for o in outcomes)}; "
        f"gave up on the original: {sum(o.gave_up for o in outcomes)}",
        f"- of the {len(passed_first)} whose original passed its first check: at the optimum "
        f"{sum(o.optimum for o in passed_first)}, gave up {sum(o.gave_up for o in passed_first)}",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10, help="salts 0..N-1 of each flaky case")
    parser.add_argument("--only", nargs="*", default=None, help="models (chain, chain200, residual, multi_io)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=BENCH / "out" / "flaky_original")
    parser.add_argument("--pick", nargs="*", default=None, help="MODEL@SALT runs to do again, merged into results.json")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    models = [m for m, fs in FAILURES.items() if any(f.kind == "flaky" for f in fs)]
    models = [m for m in models if not args.only or m in args.only]
    wanted = [(m, str(s)) for m in models for s in range(args.seeds)]
    kept: dict[tuple[str, str], Outcome] = {}
    if args.pick:
        kept = {(o["model"], o["salt"]): Outcome(**o) for o in json.loads((out / "results.json").read_text())}
        wanted = [(p.split("@")[0], p.split("@")[1]) for p in args.pick]
    started = time.monotonic()
    for model, salt in wanted:
        outcome = run(model, salt, out, args.timeout)
        kept[(model, salt)] = outcome
        print(json.dumps(asdict(outcome)), flush=True)
    outcomes = list(kept.values())
    (out / "results.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    text = markdown(outcomes)
    (out / "results.md").write_text(text)
    print(text)
    print(f"total {time.monotonic() - started:.0f}s; results in {out / 'results.md'}")


if __name__ == "__main__":
    main()

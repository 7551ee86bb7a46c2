"""Warm check runners (issue 31), side by side with a tree without them: spec checks' start-up and
per-check wall, then whole reductions on the command line and in the embedded service, for
op-present, compare and golden specs. Answers and check counts are compared between the trees.

    git worktree add /tmp/base31 <commit before the change>
    python bench/warm_checks_bench.py --before /tmp/base31 [--checks 20] [--label run]

Each measure runs the tree's own code (``PYTHONPATH`` = the tree, first), one tree after the other
for each row, in the same run. Models (built in code):

- op-present: the 100-node chain of ``service_parallel_bench.chain_model`` (one ``Mul`` at node 66),
  ``linear`` mode on the embedded service (the issue's job; ``auto`` on the command line);
- compare: a 23-node chain with an fp16 overflow (``tests.checks.models.chain_model(22, 11)``),
  onnxruntime fp32 against fp16;
- golden: the same chain against golden values made by ``onnx-reducer golden`` (fp16 target).

Results: ``bench/out/warm_checks-<label>.json`` and ``.md``."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import embedded_overhead_bench  # noqa: E402
from embedded_overhead_bench import Embedded  # noqa: E402
from service_parallel_bench import chain_model  # noqa: E402

from tests.checks.models import chain_model as overflow_chain  # noqa: E402

TOLERANCE = "tolerance: {atol: 0.001, rtol: 0.001}\n"
SPECS = {
    "op-present": "kind: op-present\nops: [Mul]\n",
    "compare": "kind: compare\nreference: {runtime: onnxruntime}\ntarget: {runtime: onnxruntime, precision: fp16}\n"
    + TOLERANCE,
    "golden": "kind: golden\ntarget: {runtime: onnxruntime, precision: fp16}\n" + TOLERANCE,
}

# Run in a tree's own interpreter environment: N checks of one spec on one model, in this process.
PER_CHECK = """
import json, sys, time
from pathlib import Path
from checks.build import build_check
from checks.spec import parse_check_spec
spec, model, golden, count = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
check = build_check(parse_check_spec(Path(spec).read_text()), golden=Path(golden) if golden else None)
walls, verdicts = [], []
for _ in range(count):
    started = time.monotonic()
    verdict, _ = check.run(model)
    walls.append(time.monotonic() - started)
    verdicts.append(f"{verdict.kind.value} {verdict.signature}")
print(json.dumps({"walls": walls, "verdicts": sorted(set(verdicts))}))
"""


def tree_env(tree: Path, home: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return env if home is None else {**env, "ONNX_REDUCER_HOME": str(home)}


def prepare(folder: Path) -> dict[str, Path]:
    """The models, specs and golden values of the three rows, in ``folder``."""
    (folder / "chain100.onnx").write_bytes(chain_model(100, 66))
    import onnx

    onnx.save(overflow_chain(22, 11), str(folder / "overflow23.onnx"))
    for name, text in SPECS.items():
        (folder / f"{name}.yaml").write_text(text)
    subprocess.run(
        [sys.executable, "-m", "reducer_cli.main", "golden", "overflow23.onnx", "-o", "overflow23.golden"],
        cwd=folder,
        env=tree_env(ROOT),
        check=True,
        capture_output=True,
    )
    return {
        "op-present": folder / "chain100.onnx",
        "compare": folder / "overflow23.onnx",
        "golden": folder / "overflow23.onnx",
    }


def golden_for(kind: str, folder: Path) -> str:
    return str(folder / "overflow23.golden") if kind == "golden" else ""


def per_check(tree: Path, kind: str, model: Path, folder: Path, count: int) -> dict[str, Any]:
    """The first check (its start-up: a warm runner starts there) and the mean of the others."""
    args = [str(folder / f"{kind}.yaml"), str(model), golden_for(kind, folder), str(count)]
    done = subprocess.run(
        [sys.executable, "-c", PER_CHECK, *args], cwd=folder, env=tree_env(tree), check=True, capture_output=True
    )
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    walls = result["walls"]
    return {
        "first_s": round(walls[0], 3),
        "mean_s": round(statistics.fmean(walls[1:]), 4),
        "median_s": round(statistics.median(walls[1:]), 4),
        "verdicts": result["verdicts"],
    }


def cli_reduce(tree: Path, kind: str, model: Path, folder: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(dir=folder, prefix=f"cli-{kind}-"))
    args = ["reduce", str(model), "-o", "bad.onnx", "--check-spec", str(folder / f"{kind}.yaml")]
    args += ["--summary-json", "s.json", "--no-progress"]
    if kind == "golden":
        args += ["--golden", golden_for(kind, folder)]
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "reducer_cli.main", *args], cwd=work, env=tree_env(tree), check=True, capture_output=True
    )
    wall = time.monotonic() - started
    summary = json.loads((work / "s.json").read_text())
    return {
        "wall_s": round(wall, 2),
        "checks": summary["checks_run"],
        "mean_check_s": round(summary["check_time_s"] / max(summary["checks_run"], 1), 4),
        "answer": summary["min_bad_nodes"],
        "sha": hashlib.sha256((work / "bad.onnx").read_bytes()).hexdigest()[:12],
    }


SLOTS = {"workers": 2}  # LOCAL_WORKERS of the embedded service (--workers)


def embedded_job(tree: Path, kind: str, model: Path, folder: Path) -> dict[str, Any]:
    """One job on ``onnx-reducer serve`` (``--workers`` slots, SQLite) running the tree's code."""
    work = Path(tempfile.mkdtemp(dir=folder, prefix=f"serve-{kind}-"))
    embedded_overhead_bench.ROOT = tree  # the server's PYTHONPATH (read when it starts)
    server = Embedded(work, workers=SLOTS["workers"])
    try:
        return _submit(server, kind, model, folder)
    finally:
        server.close()


def _submit(server: Embedded, kind: str, model: Path, folder: Path) -> dict[str, Any]:
    data = {"check_spec": SPECS[kind], "mode": "linear" if kind == "op-present" else "auto"}
    files: dict[str, Any] = {"model": ("model.onnx", model.read_bytes())}
    if kind == "golden":
        files["golden"] = ("g.golden", Path(golden_for(kind, folder)).read_bytes())
    with server.client() as client:
        response = client.post("/v1/jobs", files=files, data=data)
        response.raise_for_status()
        job_id = response.json()["id"]
        started = time.monotonic()
        while True:
            job = client.get(f"/v1/jobs/{job_id}").json()
            if job["status"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.5)
        wall = time.monotonic() - started
        answer = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad")
    with sqlite3.connect(server.home / "onnx-reducer.db") as conn:
        rows = conn.execute("SELECT duration_s, cached FROM iterations WHERE job_id = ? AND NOT pending", (job_id,))
        durations = [duration for duration, cached in rows if not cached]
    return {
        "status": job["status"],
        "wall_s": round(wall, 1),
        "checks": len(durations),
        "mean_check_s": round(statistics.fmean(d or 0.0 for d in durations), 4) if durations else None,
        "median_check_s": round(statistics.median(d or 0.0 for d in durations), 4) if durations else None,
        "nodes_after": job.get("nodes_after"),
        "sha": hashlib.sha256(answer.content).hexdigest()[:12] if answer.status_code == 200 else None,
    }


def ratio(before: float | None, after: float | None) -> float | None:
    return round(before / after, 1) if before and after else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="a worktree of the commit to compare with")
    parser.add_argument("--checks", type=int, default=20, help="checks per spec for the per-check rows")
    parser.add_argument("--only", nargs="*", default=["checks", "cli", "embedded"])
    parser.add_argument("--kinds", nargs="*", default=list(SPECS))
    parser.add_argument("--workers", type=int, default=2, help="the embedded service's slots (LOCAL_WORKERS)")
    parser.add_argument("--label", default="run")
    args = parser.parse_args()
    SLOTS["workers"] = args.workers
    trees = {"before": args.before.resolve(), "after": ROOT}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="orx-warm-bench-") as tmp:
        folder = Path(tmp)
        models = prepare(folder)
        for kind, model in models.items():
            if kind not in args.kinds:
                continue
            for what, measure in (("checks", per_check), ("cli", cli_reduce), ("embedded", embedded_job)):
                if what not in args.only:
                    continue
                pair: dict[str, Any] = {"row": f"{what} {kind}"}
                for name, tree in trees.items():
                    extra = (args.checks,) if what == "checks" else ()
                    pair[name] = measure(tree, kind, model, folder, *extra)  # type: ignore[operator]
                    print(pair["row"], name, pair[name], flush=True)
                rows.append(pair)
    OUT.mkdir(exist_ok=True)
    (OUT / f"warm_checks-{args.label}.json").write_text(json.dumps(rows, indent=2))
    (OUT / f"warm_checks-{args.label}.md").write_text(table(rows))
    print(table(rows))


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| row | before | after | before/after |",
        "|---|---|---|---|",
    ]
    for row in rows:
        before, after = row["before"], row["after"]
        key = "mean_s" if "mean_s" in before else "wall_s"
        lines.append(
            f"| {row['row']} | {json.dumps(before)} | {json.dumps(after)} | {ratio(before[key], after[key])} ({key}) |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

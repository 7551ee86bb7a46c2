"""Check counts of release bisection (``onnx-reducer bisect-releases``, issue 28).

Part 1, real onnxruntime: the three releases of tests/ort_envs.py side by side (a venv each, under
build/ort-envs/), a command check failing from the second release on, run by the command line;
the releases checked against the bound ``ceil(log2 R) + 1``, the runs, and the time (with a
flaky check failing every second run: ``--flaky``).
Part 2, the search alone (``reducer_core.release_bisect``): for R releases every first failing
release (the oldest too: every release fails), the most and the mean releases checked; and a check
failing with rate p on failing releases (``flaky=True``): runs per search and how often the
answer was right, over 200 seeded searches each.

    PYTHONPATH=. .venv/bin/python bench/release_bisect_bench.py
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import onnx
from onnx import helper

from reducer_cli.main import run
from reducer_core.release_bisect import Outcome, ReleaseBisection, max_release_checks
from reducer_core.verdict import Verdict, VerdictKind
from tests.models import make_model
from tests.ort_envs import RELEASES, all_env_pythons

FAIL = Verdict(VerdictKind.FAIL, "exit=1")
PASS = Verdict(VerdictKind.PASS)
SECOND = tuple(int(p) for p in RELEASES[1].split(".")[:2])
DETERMINISTIC = (
    "import sys, onnxruntime as o; "
    f"sys.exit(1 if tuple(int(p) for p in o.__version__.split('.')[:2]) >= {SECOND} else 0)"
)
FLAKY = (
    "import pathlib, sys, onnxruntime as o; c = pathlib.Path(sys.argv[1]); n = int(c.read_text() or 0) + 1 "
    "if c.exists() else 1; c.write_text(str(n)); "
    f"sys.exit(1 if tuple(int(p) for p in o.__version__.split('.')[:2]) >= {SECOND} and n % 2 == 0 else 0)"
)


def real_runs() -> None:
    pythons = all_env_pythons()
    print("| check | releases R | answer (first failing / last passing) | releases checked | bound | runs | time |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = folder / "model.onnx"
        onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], ["x"], ["y"]), model)
        for name, program, extra in (
            ("deterministic", DETERMINISTIC, []),
            ("flaky (fails every 2nd run), --flaky", FLAKY, ["--flaky"]),
        ):
            spec = folder / "spec.json"
            spec.write_text(json.dumps({"kind": "command", "command": ["python", "-c", program, str(folder / "n")]}))
            (folder / "n").unlink(missing_ok=True)
            summary = folder / "summary.json"
            envs = [arg for r in RELEASES for arg in ("--runtime-env", f"{r}={pythons[r]}")]
            started = time.perf_counter()
            code = run(
                [
                    "bisect-releases",
                    str(model),
                    "--check-spec",
                    str(spec),
                    *envs,
                    *extra,
                    "--summary-json",
                    str(summary),
                ]
            )
            elapsed = time.perf_counter() - started
            data = json.loads(summary.read_text())
            assert code == 0, code
            print(
                f"| {name} | {len(RELEASES)} | {data['first_failing']} / {data['last_passing']} | {data['checks']} | "
                f"{data['max_checks']} | {data['runs']} | {elapsed:.1f} s |"
            )


def search_alone() -> None:
    print()
    print("| R | most releases checked | mean | ceil(log2 R)+1 |")
    print("|---|---|---|---|")
    for count in (2, 3, 4, 5, 8, 16, 32, 64):
        names = [f"1.{m}.0" for m in range(count)]
        checks = []
        for first_bad in range(count):
            search = ReleaseBisection(names)
            while (release := search.next_release()) is not None:
                search.record(release, FAIL if names.index(release) >= first_bad else PASS)
            answer = search.answer()
            assert answer.first_failing is not None and answer.first_failing.release == names[first_bad]
            checks.append(answer.checks)
        print(f"| {count} | {max(checks)} | {statistics.mean(checks):.2f} | {max_release_checks(count)} |")


def flaky_searches() -> None:
    print()
    print("| R | failure rate p | right answers / 200 | newest passed its 4 runs | mean runs | mean releases checked |")
    print("|---|---|---|---|---|---|")
    for count in (3, 8, 16):
        names = [f"1.{m}.0" for m in range(count)]
        first_bad = count // 2
        for rate in (0.3, 0.5, 0.8):
            rng = random.Random(28)
            right = newest_passed = 0
            runs, checks = [], []
            for _ in range(200):
                search = ReleaseBisection(names, flaky=True)
                while (release := search.next_release()) is not None:
                    fails = names.index(release) >= first_bad and rng.random() < rate
                    search.record(release, FAIL if fails else PASS)
                answer = search.answer()
                if answer.outcome is Outcome.NEWEST_PASSES:
                    newest_passed += 1
                    continue
                right += answer.first_failing is not None and answer.first_failing.release == names[first_bad]
                runs.append(answer.runs)
                checks.append(answer.checks)
            print(
                f"| {count} | {rate} | {right} | {newest_passed} | {statistics.mean(runs):.1f} | "
                f"{statistics.mean(checks):.2f} |"
            )


if __name__ == "__main__":
    real_runs()
    search_alone()
    flaky_searches()

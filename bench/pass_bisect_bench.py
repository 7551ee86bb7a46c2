"""Check counts of pass bisection (``onnx-reducer bisect-passes``, issue 28).

Part 1, real onnxruntime: the fusion model of the tests (three transformers change it) with a
check failing on one fusion's op in the graph onnxruntime optimized, on the original and on the
min-bad a reduction wrote; checks, candidates and the single-culprit bound ``ceil(log2 P) + 2``
(every check, the no-optimizer one included).
Part 2, the search alone (``reducer_core.pass_bisect.search_candidates``): for P candidates every
position of a single culprit, the most checks any took (all of them), and two optimizers either of
which brings the failure in (ddmin).

    PYTHONPATH=. .venv/bin/python bench/pass_bisect_bench.py
"""

from __future__ import annotations

import itertools
import math
import tempfile
from pathlib import Path

import onnx

from checks.spec import parse_check_spec
from engine.pass_bisect import bisect_passes
from reducer_core.pass_bisect import search_candidates
from tests.pass_models import fusion_model, optimized_op_spec


def real_runs() -> None:
    print("| model | failing op | candidates P | answer | checks | bound ceil(log2 P)+2 | verified |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fusions.onnx"
        onnx.save(fusion_model(), str(path))
        for op in ("FusedMatMul", "Gelu", "MatMul"):
            answer = bisect_passes(parse_check_spec(optimized_op_spec(op)), path)
            found = ", ".join(answer.optimizers) or answer.outcome.value
            print(
                f"| fusion model (8 nodes) | {op} | {len(answer.candidates)} | {found} | {answer.checks} | "
                f"{answer.check_bound} | {answer.verified} |"
            )


def simulated() -> None:
    print()
    print(
        "| P | single culprit: most checks | ceil(log2 P)+2 "
        "| two optimizers, either brings it in (ddmin): most checks |"
    )
    print("|---|---|---|---|")
    for count in (1, 2, 3, 4, 8, 16, 32, 64):
        names = [f"T{i}" for i in range(count)]
        single = max(_probes(names, {c}) for c in names)
        pairs = list(itertools.combinations(names, 2))[:200]
        double = max((_probes(names, set(p), either=True) for p in pairs), default=None)
        print(f"| {count} | {single} | {math.ceil(math.log2(count)) + 2} | {'-' if double is None else double} |")


def _probes(names: list[str], culprits: set[str], either: bool = False) -> int:
    asked = 0

    def fails(disabled: frozenset[str], phase: str) -> bool:
        nonlocal asked
        asked += 1
        return not (culprits <= disabled if either else disabled & culprits)

    result = search_candidates(names, fails)
    assert set(result.optimizers) == culprits and result.verified
    return asked


if __name__ == "__main__":
    real_runs()
    simulated()

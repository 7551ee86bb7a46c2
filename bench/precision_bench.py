"""How many checks ``onnx-reducer precision`` spends, and how many nodes it keeps in fp32, on chains
of N nodes where a planted set must stay fp32 (an oracle stands in for the check: the count of
checks is what a real run pays, one onnxruntime run each).

Beside it, a prefix bisection as Polygraphy's ``debug precision --mode bisect`` does (emulated, not
run: it needs TensorRT): mark the first k layers fp32, binary-search the smallest k that passes.
Its answer is a prefix reaching the last needed node.

    .venv/bin/python bench/precision_bench.py            # prints a Markdown table
"""

from __future__ import annotations

import math

from onnx import TensorProto, helper

from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.driver import drive
from reducer_core.graph import GraphIndex
from reducer_core.machine import ReductionMachine
from reducer_core.prepare import prepare
from reducer_core.verdict import Goal, Verdict, VerdictKind

SIZES = (32, 128, 512)
MODES = ("auto", "minimize", "bisect", "linear")


def chain(n: int) -> GraphIndex:
    names = ["x"] + [f"t{i}" for i in range(n)]
    nodes = [helper.make_node("Relu", [names[i]], [names[i + 1]], name=f"n{i}") for i in range(n)]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return GraphIndex.build(prepare(model))


def planted(n: int) -> dict[str, frozenset[int]]:
    """One overflowing output node; one overflowing tensor (its writer and reader); two of those."""
    return {
        "1 node": frozenset({n // 2}),
        "1 tensor (2 nodes)": frozenset({n // 3, n // 3 + 1}),
        "2 tensors (4 nodes)": frozenset({n // 4, n // 4 + 1, 3 * n // 4, 3 * n // 4 + 1}),
    }


def run(index: GraphIndex, needed: frozenset[int], mode: str) -> tuple[int, int]:
    machine = ReductionMachine(index, SessionConfig(mode=mode, goal=Goal.PASS), VerdictCache(index.fingerprint, "b"))

    def check(candidate: Candidate) -> Verdict:
        return Verdict(VerdictKind.PASS if needed <= candidate.nodes else VerdictKind.FAIL)

    drive(machine, lambda request: check(request.candidate))  # type: ignore[union-attr]
    result = machine.result
    assert needed <= result.min_bad.nodes
    return result.checks_run, len(result.min_bad)


def prefix_bisect(n: int, needed: frozenset[int]) -> tuple[int, int]:
    """Checks and answer size of a binary search for the shortest passing prefix (plus the fp16
    and all-fp32 checks, as ours counts them)."""
    return 2 + math.ceil(math.log2(n)), max(needed) + 1


def main() -> None:
    print("| N | planted | " + " | ".join(MODES) + " | prefix bisect (Polygraphy-like) |")
    print("|---|---|" + "---|" * (len(MODES) + 1))
    for n in SIZES:
        index = chain(n)
        for label, needed in planted(n).items():
            cells = [f"{c} checks, {k} kept" for c, k in (run(index, needed, mode) for mode in MODES)]
            checks, kept = prefix_bisect(n, needed)
            print(f"| {n} | {label} | " + " | ".join(cells) + f" | {checks} checks, {kept} kept |")


if __name__ == "__main__":
    main()

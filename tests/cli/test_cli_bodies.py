"""``onnx-reducer reduce`` on a real Loop model whose failure lives inside the Loop's body: the
check runs in a child Python process, proves each candidate valid (full checker, an onnxruntime
run) and prints a match for ``--fail-regex`` when an ``Erf`` op is present in any scope."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import onnx
import pytest

from bench.control_flow_zoo import loop_model, nested_model, node_names
from reducer_core.bodies import body_size
from tests.cli.helpers import ITER, reduce

CHECK = """
import sys
import numpy as np
import onnx
import onnxruntime as ort

path = sys.argv[1]
with open("checks.log", "a") as log:
    log.write(path + "\\n")
model = onnx.load(path)
try:
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {}
    for info in session.get_inputs():
        dims = [d if isinstance(d, int) else 1 for d in info.shape]
        dtype = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_}[info.type]
        feeds[info.name] = np.ones(dims, dtype=dtype)
    session.run(None, feeds)
except Exception as error:
    with open("invalid.log", "a") as log:
        log.write(f"{error}\\n")
    sys.exit(2)

def ops(graph):
    for node in graph.node:
        yield node.op_type
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from ops(attr.g)

if "Erf" in set(ops(model.graph)):
    print("found op Erf")
"""


def _check() -> list[str]:
    Path("check.py").write_text(CHECK)
    return [sys.executable, str(Path("check.py").resolve()), ITER]


def _checks() -> int:
    return len(Path("checks.log").read_text().splitlines())


def test_a_culprit_inside_a_loop_body_is_extracted_out_of_the_loop(in_tmp: Path) -> None:
    model = loop_model()
    onnx.save(model, "loop.onnx")
    argv = ["-o", "r.onnx", "--fail-regex", "found op Erf", "--summary-json", "s.json"]
    argv.append("--no-reduce-data")  # the budget below is the graph's (smaller inputs: test_cli_data.py)
    assert reduce("loop.onnx", *argv, check=_check()) == 0
    assert json.loads(Path("s.json").read_text())["min_bad_nodes"] == ["Erf:body/culprit (out of Loop:loop's body)"]
    assert not Path("invalid.log").exists()
    result = onnx.load("r.onnx")
    onnx.checker.check_model(result, full_check=True)
    assert [node.op_type for node in result.graph.node] == ["Erf"]
    # the original check, the outer graph, the body, and one check of the extracted culprit
    assert _checks() <= math.ceil(math.log2(body_size(model))) + 5


@pytest.mark.parametrize("mode", ["auto", "bisect"])
def test_a_culprit_reading_iteration_state_keeps_a_small_loop(in_tmp: Path, mode: str) -> None:
    """The nested If reads the Loop's condition: the answer is the Loop with a small body."""
    model = nested_model()
    onnx.save(model, "nested.onnx")
    check = _check()
    assert reduce("nested.onnx", "-o", "r.onnx", "--fail-regex", "found op Erf", "--mode", mode, check=check) == 0
    assert not Path("invalid.log").exists()
    result = onnx.load("r.onnx")
    assert [node.op_type for node in result.graph.node] == ["Loop"]
    assert "inner_then/culprit" in node_names(result)
    assert body_size(result) <= 6 < body_size(model)


def test_the_log_and_the_summary_count_body_nodes(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """34 nodes: 4 top-level ones and the Loop body's 30 (before, "nodes before: 4")."""
    model = loop_model()
    onnx.save(model, "loop.onnx")
    argv = ["-o", "r.onnx", "--fail-regex", "found op Erf", "--summary-json", "s.json", "--no-reduce-data"]
    assert reduce("loop.onnx", *argv, check=_check()) == 0
    summary = json.loads(Path("s.json").read_text())
    assert summary["nodes_before"] == body_size(model) == 34
    assert summary["nodes_after"] == body_size(onnx.load("r.onnx")) == 1
    err = capsys.readouterr().err
    assert "Reducing loop.onnx: 4 nodes (34 with Loop/If bodies)" in err
    assert "nodes before: 34  after: 1" in err


def test_a_loop_whose_body_nothing_needs_is_kept_with_an_empty_body(in_tmp: Path) -> None:
    """The check fails while a Loop is present: the answer is the Loop alone, its body emptied
    (before, one body node was left that nothing reads), and no graph input nobody reads."""
    model = loop_model(length=8, culprit=3)
    onnx.save(model, "loop.onnx")
    Path("check.py").write_text(CHECK.replace('"Erf" in set(ops(model.graph))', '"Loop" in set(ops(model.graph))'))
    check = [sys.executable, str(Path("check.py").resolve()), ITER]
    argv = ["-o", "r.onnx", "--fail-regex", "found op Erf", "--no-reduce-data"]
    assert reduce("loop.onnx", *argv, check=check) == 0
    assert not Path("invalid.log").exists()
    result = onnx.load("r.onnx")
    onnx.checker.check_model(result, full_check=True)
    assert [node.op_type for node in result.graph.node] == ["Loop"]
    assert body_size(result) == 1  # the Loop, nothing in its body
    read = {name for node in result.graph.node for name in node.input}
    assert {i.name for i in result.graph.input} | {t.name for t in result.graph.initializer} <= read

"""``onnx-reducer reduce`` shrinks the min-bad model's input sizes (``reducer_core.data_reduction``):
a real model with a dynamic sequence dimension, fixed to 64 by ``--model-input-shapes``, and a
check (a child Python process) that runs each candidate in onnxruntime at its own input sizes and
fails when an ``Erf`` op is present and the sequence length is at least a threshold."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import pytest

from reducer_core.data_edits import input_dims
from tests.cli.helpers import ITER, reduce
from tests.core.test_data_reduction import HIDDEN, ROWS, SEQ, position_model, seq_model

CHECK = """
import sys
import numpy as np
import onnx
import onnxruntime as ort

path, threshold = sys.argv[1], int(sys.argv[2])
model = onnx.load(path)
onnx.checker.check_model(model, full_check=True)
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
feeds = {i.name: np.ones([d if isinstance(d, int) else 1 for d in i.shape], np.float32) for i in session.get_inputs()}
session.run(None, feeds)
seq = max(i.shape[1] for i in session.get_inputs())
with open("checks.log", "a") as log:
    log.write(f"{seq}\\n")
if any(n.op_type == "Erf" for n in model.graph.node) and seq >= threshold:
    print("found op Erf")
"""

SHAPES = ["--model-input-shapes", f"tokens:[1,{SEQ},{HIDDEN}]", f"mask:[1,{SEQ},1]"]


def _dynamic_model() -> str:
    model = seq_model()
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[1].dim_param = "seq"
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, "model.onnx")
    return "model.onnx"


def _check(threshold: int) -> list[str]:
    Path("check.py").write_text(CHECK)
    return [sys.executable, str(Path("check.py").resolve()), ITER, str(threshold)]


def _sizes() -> list[int]:
    return [int(line) for line in Path("checks.log").read_text().splitlines()]


def _reduce(threshold: int, *options: str) -> dict[str, object]:
    argv = ["-o", "r.onnx", "--fail-regex", "found op Erf", "--summary-json", "s.json", *SHAPES, *options]
    assert reduce(_dynamic_model(), *argv, check=_check(threshold)) == 0
    summary: dict[str, object] = json.loads(Path("s.json").read_text())
    return summary


def _seq_of_result() -> int:
    model = onnx.load("r.onnx")
    assert [n.op_type for n in model.graph.node] == ["Erf"]
    (dims,) = input_dims(model).values()
    assert isinstance(dims[1], int)
    return dims[1]


def test_a_failure_at_any_size_shrinks_the_sequence_to_one(in_tmp: Path) -> None:
    summary = _reduce(1)
    assert _seq_of_result() == 1
    shrunk = summary["smaller_inputs"]
    assert isinstance(shrunk, dict)
    assert shrunk["elements_before"] == SEQ * HIDDEN and shrunk["elements_after"] == 1
    phases = [it["phase"] for it in summary["iterations"]]  # type: ignore[attr-defined]
    assert phases.count("data") == 6 + 3  # halvings: 64 -> 1, then the hidden size 8 -> 1


@pytest.mark.parametrize("threshold", [17, 40])
def test_a_failure_from_a_length_on_shrinks_to_exactly_that_length(in_tmp: Path, threshold: int) -> None:
    summary = _reduce(threshold)
    assert _seq_of_result() == threshold  # the bisection is exact: threshold - 1 passed
    assert threshold - 1 in _sizes()
    data_checks = [it for it in summary["iterations"] if it["phase"] == "data"]  # type: ignore[attr-defined]
    assert len(data_checks) <= 2 * 6 + 3


def test_no_reduce_data_leaves_the_sizes_alone(in_tmp: Path) -> None:
    summary = _reduce(1, "--no-reduce-data")
    assert _seq_of_result() == SEQ
    assert summary["smaller_inputs"] is None
    assert set(_sizes()) == {SEQ}


def test_a_replay_without_the_data_phase_resumes_into_it_and_then_runs_nothing(in_tmp: Path) -> None:
    first = _reduce(17, "--no-reduce-data", "--save-debug-replay", "one.json")
    graph_checks = len(_sizes())
    assert graph_checks == first["checks_run"]
    second = _reduce(17, "--load-debug-replay", "one.json", "--save-debug-replay", "two.json")
    assert _seq_of_result() == 17
    data_checks = len(_sizes()) - graph_checks
    assert data_checks == sum(1 for it in second["iterations"] if it["phase"] == "data" and not it["cached"])  # type: ignore[attr-defined]
    assert data_checks > 0
    before = len(_sizes())
    _reduce(17, "--load-debug-replay", "two.json")
    assert len(_sizes()) == before  # every check answered from the replay
    assert _seq_of_result() == 17


LARGE_CHECK = """
import sys
import numpy as np
import onnx
import onnxruntime as ort

path, limit = sys.argv[1], float(sys.argv[2])
onnx.checker.check_model(onnx.load(path), full_check=True)
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
feeds = {i.name: np.ones([d if isinstance(d, int) else 1 for d in i.shape], np.float32) for i in session.get_inputs()}
if max(float(np.max(o)) for o in session.run(None, feeds)) >= limit:
    print("large value")
"""


def _reduce_positions(*options: str) -> dict[str, object]:
    onnx.save(position_model(), "positions.onnx")
    Path("check.py").write_text(LARGE_CHECK)
    check = [sys.executable, str(Path("check.py").resolve()), ITER, "100"]
    argv = ["-o", "r.onnx", "--fail-regex", "large value", "--summary-json", "s.json", *options]
    assert reduce("positions.onnx", *argv, check=check) == 0
    summary: dict[str, object] = json.loads(Path("s.json").read_text())
    return summary


def test_the_weights_of_the_answer_are_sliced_to_what_still_fails(in_tmp: Path) -> None:
    """The Gather of a position table fails from position 10 on: the answer reads 11 positions of
    one column, and the table holds those rows only."""
    summary = _reduce_positions()
    model = onnx.load("r.onnx")
    assert [n.op_type for n in model.graph.node] == ["Gather"]
    assert {t.name: list(t.dims) for t in model.graph.initializer} == {"table": [11, 1], "table.indices": [1, 11]}
    shrunk = summary["smaller_inputs"]
    assert isinstance(shrunk, dict)
    assert shrunk["initializer_bytes_before"] == ROWS * HIDDEN * 4 + SEQ * 8
    assert shrunk["initializer_bytes_after"] == 11 * 4 + 11 * 8
    assert shrunk["weights"] == f"{SEQ} -> 11, {HIDDEN} -> 1; read part of table"
    with_data = summary["checks_run"]
    plain = _reduce_positions("--no-reduce-data")
    assert plain["smaller_inputs"] is None
    assert [list(t.dims) for t in onnx.load("r.onnx").graph.initializer] == [[ROWS, HIDDEN], [1, SEQ]]
    assert isinstance(with_data, int) and isinstance(plain["checks_run"], int)
    assert with_data > plain["checks_run"]

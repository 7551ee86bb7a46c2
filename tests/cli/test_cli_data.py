"""``onnx-reducer reduce --reduce-data`` shrinks the min-bad model's input sizes
(``reducer_core.data_reduction``): a real model with a sequence dimension of 64, and a check (a
child Python process) that runs each candidate in onnxruntime at its own input sizes and fails when
an ``Erf`` op is present and the sequence length is at least a threshold. The step is opt-in, keeps
what the user fixed (``--model-input-shapes``: tests/cli/test_shapes.py; a check's own inputs),
skips op-present checks, and counts only the original's failure (not a runtime refusing a size)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from checks.command import CommandCheck
from checks.spec import parse_check_spec
from engine.session import SessionCheck, data_config
from engine.workspace import ReduceOptions
from reducer_core.config import SessionConfig
from reducer_core.data_edits import input_dims
from tests.cli.helpers import ITER, reduce
from tests.core.test_data_reduction import HIDDEN, ROWS, SEQ, position_model, seq_model
from tests.models import IR_VERSION, OPSET

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


def _static_model() -> str:
    model = seq_model()
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, "model.onnx")
    return "model.onnx"


def _check(threshold: int) -> list[str]:
    Path("check.py").write_text(CHECK)
    return [sys.executable, str(Path("check.py").resolve()), ITER, str(threshold)]


def _sizes() -> list[int]:
    return [int(line) for line in Path("checks.log").read_text().splitlines()]


def _reduce(threshold: int, *options: str) -> dict[str, object]:
    argv = ["-o", "r.onnx", "--fail-regex", "found op Erf", "--summary-json", "s.json", *options]
    assert reduce(_static_model(), *argv, check=_check(threshold)) == 0
    summary: dict[str, object] = json.loads(Path("s.json").read_text())
    return summary


def _seq_of_result() -> int:
    model = onnx.load("r.onnx")
    assert [n.op_type for n in model.graph.node] == ["Erf"]
    (dims,) = input_dims(model).values()
    assert isinstance(dims[1], int)
    return dims[1]


def _data_checks(summary: dict[str, object], fresh: bool = False) -> int:
    """The iterations of the data step (``fresh``: only those not answered from a replay)."""
    iterations = summary["iterations"]
    assert isinstance(iterations, list)
    return sum(1 for it in iterations if it["phase"] == "data" and not (fresh and it["cached"]))


def test_a_failure_at_any_size_shrinks_the_sequence_to_one_in_one_check_per_size(in_tmp: Path) -> None:
    summary = _reduce(1, "--reduce-data")
    assert _seq_of_result() == 1
    shrunk = summary["smaller_inputs"]
    assert isinstance(shrunk, dict)
    assert shrunk["elements_before"] == SEQ * HIDDEN and shrunk["elements_after"] == 1
    assert _data_checks(summary) == 2  # size 1 first: 64 -> 1, then the hidden size 8 -> 1


@pytest.mark.parametrize("threshold", [17, 40])
def test_a_failure_from_a_length_on_shrinks_to_exactly_that_length(in_tmp: Path, threshold: int) -> None:
    summary = _reduce(threshold, "--reduce-data")
    assert _seq_of_result() == threshold  # the bisection is exact: threshold - 1 passed
    assert threshold - 1 in _sizes()
    assert _data_checks(summary) <= 1 + 2 * 6 + 1  # size 1, halving and bisection; the hidden size: 1


@pytest.mark.parametrize("flag", [[], ["--no-reduce-data"]], ids=["default", "no-reduce-data"])
def test_the_sizes_stay_by_default_and_with_no_reduce_data(in_tmp: Path, flag: list[str]) -> None:
    summary = _reduce(1, *flag)
    assert _seq_of_result() == SEQ
    assert summary["smaller_inputs"] is None
    assert _data_checks(summary) == 0
    assert set(_sizes()) == {SEQ}


def test_a_replay_without_the_data_phase_resumes_into_it_and_then_runs_nothing(in_tmp: Path) -> None:
    first = _reduce(17, "--save-debug-replay", "one.json")
    graph_checks = len(_sizes())
    assert graph_checks == first["checks_run"]
    second = _reduce(17, "--reduce-data", "--load-debug-replay", "one.json", "--save-debug-replay", "two.json")
    assert _seq_of_result() == 17
    data_checks = len(_sizes()) - graph_checks
    assert data_checks == _data_checks(second, fresh=True)
    assert data_checks > 0
    before = len(_sizes())
    _reduce(17, "--reduce-data", "--load-debug-replay", "two.json")
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
    summary = _reduce_positions("--reduce-data")
    model = onnx.load("r.onnx")
    assert [n.op_type for n in model.graph.node] == ["Gather"]
    assert {t.name: list(t.dims) for t in model.graph.initializer} == {"table": [11, 1], "table.indices": [1, 11]}
    shrunk = summary["smaller_inputs"]
    assert isinstance(shrunk, dict)
    assert shrunk["initializer_bytes_before"] == ROWS * HIDDEN * 4 + SEQ * 8
    assert shrunk["initializer_bytes_after"] == 11 * 4 + 11 * 8
    assert shrunk["weights"] == f"{SEQ} -> 11, {HIDDEN} -> 1; read part of table"
    with_data = summary["checks_run"]
    plain = _reduce_positions()
    assert plain["smaller_inputs"] is None
    assert [list(t.dims) for t in onnx.load("r.onnx").graph.initializer] == [[ROWS, HIDDEN], [1, SEQ]]
    assert isinstance(with_data, int) and isinstance(plain["checks_run"], int)
    assert with_data > plain["checks_run"]


def test_an_op_present_check_skips_the_data_step(in_tmp: Path) -> None:
    """An op-present check reads no values: no size changes its verdict, so the step costs nothing."""
    Path("spec.yaml").write_text("kind: op-present\nops: [Erf]\n")
    argv = ["-o", "r.onnx", "--check-spec", "spec.yaml", "--summary-json", "s.json", "--reduce-data"]
    assert reduce(_static_model(), *argv) == 0
    summary = json.loads(Path("s.json").read_text())
    assert _data_checks(summary) == 0
    assert summary["smaller_inputs"] is None
    assert _seq_of_result() == SEQ


OWN_INPUT_CHECK = """
import sys
import numpy as np
import onnx
import onnxruntime as ort

path = sys.argv[1]
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
session.run(None, {i.name: np.ones((4, 16), np.float32) for i in session.get_inputs()})  # its own input
if any(n.op_type == "Erf" for n in onnx.load(path).graph.node):
    sys.exit(1)
"""


def _chain_model(length: int = 20, culprit: int = 13) -> onnx.ModelProto:
    """x [4, 16] -> ``length`` unary nodes in a line, node ``culprit`` an ``Erf`` -> y."""
    ops = ("Relu", "Neg", "Abs", "Tanh", "Sigmoid")
    nodes, current = [], "x"
    for k in range(length):
        nodes.append(helper.make_node("Erf" if k == culprit else ops[k % len(ops)], [current], [f"t{k}"], name=f"n{k}"))
        current = f"t{k}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [4, 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def test_a_command_feeding_its_own_inputs_keeps_their_sizes(in_tmp: Path) -> None:
    """The issue's case: a command check runs onnxruntime on its own [4, 16] input and exits 1 when
    the Erf is present. A smaller input makes onnxruntime refuse the feed ("Got invalid dimensions
    for input"), also exit 1: not the original failure, so the answer keeps [4, 16]."""
    onnx.save(_chain_model(), "chain.onnx")
    Path("check.py").write_text(OWN_INPUT_CHECK)
    check = [sys.executable, str(Path("check.py").resolve()), ITER]
    argv = ["-o", "r.onnx", "--summary-json", "s.json", "--reduce-data"]
    assert reduce("chain.onnx", *argv, check=check) == 0
    model = onnx.load("r.onnx")
    assert [n.op_type for n in model.graph.node] == ["Erf"]
    assert list(input_dims(model).values()) == [[4, 16]]
    summary = json.loads(Path("s.json").read_text())
    assert summary["smaller_inputs"] is None
    data = [it for it in summary["iterations"] if it["phase"] == "data"]
    assert data, "smaller sizes were tried"
    assert all(not it["reproduces"] for it in data), data  # none counted: the runtime refused the feed
    ort.InferenceSession("r.onnx", providers=["CPUExecutionProvider"]).run(None, {"t12": np.ones((4, 16), np.float32)})


def test_what_the_user_fixed_reaches_the_data_step(tmp_path: Path) -> None:
    """``engine.session.data_config``: the sizes of --model-input-shapes, every input with samples
    or golden values; no data step for an op-present check; nothing without --reduce-data."""
    on = SessionConfig(reduce_data=True)
    command = SessionCheck(CommandCheck(command=["true"]))
    shapes = ReduceOptions(model=tmp_path / "m.onnx", work_dir=tmp_path, input_shapes={"x": [1, 2, 5, 5]})
    config, note = data_config(on, command, shapes)
    assert config.reduce_data and config.fixed_sizes == {2, 5} and not config.fixed_inputs
    assert "--model-input-shapes (2, 5)" in note
    compare = parse_check_spec("kind: compare\ntarget: {runtime: onnxruntime, precision: fp16}\n")
    samples = SessionCheck(CommandCheck(command=["true"]), compare, tmp_path / "made.golden", "0")
    config, note = data_config(on, samples, ReduceOptions(model=tmp_path / "m.onnx", work_dir=tmp_path))
    assert config.reduce_data and config.fixed_inputs and "samples" in note
    present = SessionCheck(CommandCheck(command=["true"]), parse_check_spec("kind: op-present\nops: [Erf]\n"))
    config, note = data_config(on, present, shapes)
    assert not config.reduce_data and "op-present" in note
    assert data_config(SessionConfig(), command, shapes) == (SessionConfig(), "")

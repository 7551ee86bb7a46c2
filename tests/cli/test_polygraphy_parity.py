"""The same reductions through real Polygraphy (``polygraphy debug reduce``, from PyPI) and through
``onnx-reducer reduce``, with the same flags and the same check script: final node sets, inputs and
outputs must agree, except where onnx-reducer's answer differs on purpose. Each scenario states
which (``SAME`` or one of the documented differences below, README "Switching from Polygraphy"),
and the test asserts that the difference is exactly that one.

Polygraphy quirk left out of the comparison: it lists a tensor read twice by the marked node
twice as a graph input (``Mul(b, b)`` gives inputs ``[b, b]``); inputs are compared as sets.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.cli.helpers import write_script
from tests.models import FLOAT, IR_VERSION, OPSET, branchy_model

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


def split_model() -> onnx.ModelProto:
    """One input, two outputs. ``n`` is a graph output and read by a Split; the Split's two
    outputs feed two branches that meet again (a shared producer with several outputs)::

    N = Neg(x) -> n (output)   S = Split(n) -> s0, s1   R = Relu(s0)   Q = Abs(s1)
    M = Add(r, q)   T = Tanh(m) -> y (output)
    """
    split = numpy_helper.from_array(np.array([1, 1], dtype=np.int64), name="split")
    nodes = [
        helper.make_node("Neg", ["x"], ["n"], name="NodeN_"),
        helper.make_node("Split", ["n", "split"], ["s0", "s1"], name="NodeS_", axis=0),
        helper.make_node("Relu", ["s0"], ["r"], name="NodeR_"),
        helper.make_node("Abs", ["s1"], ["q"], name="NodeQ_"),
        helper.make_node("Add", ["r", "q"], ["m"], name="NodeM_"),
        helper.make_node("Tanh", ["m"], ["y"], name="NodeT_"),
    ]
    graph = helper.make_graph(
        nodes,
        "split",
        [helper.make_tensor_value_info("x", FLOAT, [2, 3])],
        [helper.make_tensor_value_info("n", FLOAT, [2, 3]), helper.make_tensor_value_info("y", FLOAT, [1, 3])],
        initializer=[split],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return onnx.shape_inference.infer_shapes(model)


def crossing_model() -> onnx.ModelProto:
    """Two inputs, two outputs, branches that cross (the bench's ``multi_io``, smaller)::

    P = Relu(a)  Q = Sigmoid(b)  X = Add(p, q)  Y = Mul(p, q)  L = Tanh(x)  R = Neg(y)
    J = Add(r, x)  O = Mul(l, j) -> o1 (output)  K = Sub(j, l) -> o2 (output)
    """
    nodes = [
        helper.make_node("Relu", ["a"], ["p"], name="NodeP_"),
        helper.make_node("Sigmoid", ["b"], ["q"], name="NodeQ_"),
        helper.make_node("Add", ["p", "q"], ["x"], name="NodeX_"),
        helper.make_node("Mul", ["p", "q"], ["y"], name="NodeY_"),
        helper.make_node("Tanh", ["x"], ["l"], name="NodeL_"),
        helper.make_node("Neg", ["y"], ["r"], name="NodeR_"),
        helper.make_node("Add", ["r", "x"], ["j"], name="NodeJ_"),
        helper.make_node("Mul", ["l", "j"], ["o1"], name="NodeO_"),
        helper.make_node("Sub", ["j", "l"], ["o2"], name="NodeK_"),
    ]
    graph = helper.make_graph(
        nodes,
        "crossing",
        [helper.make_tensor_value_info(name, FLOAT, [2, 3]) for name in ("a", "b")],
        [helper.make_tensor_value_info(name, FLOAT, [2, 3]) for name in ("o1", "o2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return onnx.shape_inference.infer_shapes(model)


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "branchy": lambda: branchy_model(prefix="Node", suffix="_"),
    "split": split_model,
    "crossing": crossing_model,
}


@dataclass(frozen=True)
class Outcome:
    nodes: frozenset[str]
    inputs: frozenset[str]
    outputs: frozenset[str]

    @classmethod
    def read(cls, path: Path) -> Outcome:
        model = onnx.load(str(path))
        weights = {t.name for t in model.graph.initializer}
        return cls(
            frozenset(n.name for n in model.graph.node),
            frozenset(i.name for i in model.graph.input if i.name not in weights),
            frozenset(o.name for o in model.graph.output),
        )

    def show(self) -> str:
        return f"nodes {sorted(self.nodes)} inputs {sorted(self.inputs)} outputs {sorted(self.outputs)}"


def fails_when(*groups: tuple[str, ...], message: str = "") -> str:
    """A check script: exit 1 when all nodes of any group are in the model (``message`` printed)."""
    lines = []
    for group in groups:
        present = " && ".join(f'grep -q "Node{name}_" "$1"' for name in group)
        echo = f'echo "{message}"; ' if message else ""
        lines.append(f"if {present}; then {echo}exit 1; fi")
    return "\n".join([*lines, "exit 0"])


def _run(tool: str, work: Path, model_path: Path, flags: list[str], check: list[str]) -> Path:
    if tool == "polygraphy":
        command = [str(BIN / "polygraphy"), "debug", "reduce", str(model_path), "-o", "out.onnx", *flags]
    else:
        command = [str(BIN / "onnx-reducer"), "reduce", str(model_path), "-o", "out.onnx", "--no-progress", *flags]
    proc = subprocess.run([*command, "--check", *check], cwd=work, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"{tool} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return work / "out.onnx"


def reduce_with_both(
    tmp: Path, model: onnx.ModelProto, body: str, ours: list[str], theirs: list[str]
) -> tuple[Outcome, Outcome]:
    """(onnx-reducer's outcome, Polygraphy's). ``theirs`` may hold ``--mode bisect+linear``:
    Polygraphy's bisect, then its linear mode on the bisect result (its guide's advice)."""
    outcomes = []
    for tool, flags in (("onnx-reducer", ours), ("polygraphy", theirs)):
        work = tmp / tool
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        onnx.save(model, str(work / "model.onnx"))
        check = write_script(str(work / "check.sh"), body)
        if "bisect+linear" in flags:
            first = [f if f != "bisect+linear" else "bisect" for f in flags]
            bisected = _run(tool, work, work / "model.onnx", first, check)
            shutil.move(bisected, work / "bisected.onnx")
            linear = [f if f != "bisect+linear" else "linear" for f in flags]
            outcomes.append(Outcome.read(_run(tool, work, work / "bisected.onnx", linear, check)))
        else:
            outcomes.append(Outcome.read(_run(tool, work, work / "model.onnx", flags, check)))
    return outcomes[0], outcomes[1]


def still_fails(body: str, tmp: Path, outcome_model: Path) -> bool:
    script = tmp / "recheck.sh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return subprocess.run([str(script), str(outcome_model)], check=False).returncode != 0


# How onnx-reducer's answer may differ from Polygraphy's (README, "Switching from Polygraphy"):
SAME = "same"
# Fewer nodes: bisect/linear end by removing side branches Polygraphy's cones keep (the node that
# joins two needed branches, a sibling branch), and --no-reduce-outputs keeps only the nodes between
# the failure and the outputs, not the nodes that compute other outputs from the new inputs.
SMALLER = "smaller"
# Same nodes; an original graph output computed inside the result stays an output (Polygraphy's
# output-side reduction makes the boundary node's outputs the only ones).
ORIGINAL_OUTPUT_KEPT = "original output kept"
# Same nodes; with --no-reduce-outputs Polygraphy keeps every original output, those the result does
# not compute as constants folded from frozen branches; onnx-reducer has only the computed ones.
NO_CONSTANT_OUTPUTS = "no constant outputs"
# Same nodes; Polygraphy made a tensor produced inside the result a graph input too (it cuts the
# edge to the marked node); a candidate of onnx-reducer is a node set, so its inputs come from outside.
NO_CUT_EDGE = "no cut edge"


@dataclass(frozen=True)
class Scenario:
    model: str
    culprits: tuple[tuple[str, ...], ...]  # the check fails when all nodes of any group are present
    ours: tuple[str, ...]
    theirs: tuple[str, ...]
    expected: str
    message: str = ""

    @property
    def id(self) -> str:
        groups = "|".join("+".join(g) for g in self.culprits)
        return f"{self.model}/{groups}/{' '.join(self.ours)}~{' '.join(self.theirs)}"


def same_flags(model: str, culprits: str, flags: str, expected: str) -> Scenario:
    args = tuple(flags.split())
    return Scenario(model, tuple(tuple(g.split("+")) for g in culprits.split("|")), args, args, expected)


SCENARIOS = [
    same_flags("branchy", "H", "--mode bisect", SAME),
    same_flags("branchy", "H", "--mode linear --no-reduce-inputs", SAME),  # one output (h), not b and h
    same_flags("branchy", "H", "--mode linear --no-reduce-outputs", NO_CONSTANT_OUTPUTS),
    same_flags("branchy", "E", "--mode bisect", SAME),
    same_flags("branchy", "E", "--mode linear --no-reduce-inputs", SAME),
    same_flags("branchy", "C", "--mode bisect", SMALLER),
    same_flags("branchy", "C", "--mode linear", SAME),
    same_flags("branchy", "F", "--mode bisect --no-reduce-inputs", SAME),
    same_flags("branchy", "F", "--mode linear --no-reduce-outputs", SMALLER),
    same_flags("branchy", "A", "--mode bisect --no-reduce-inputs", SMALLER),
    same_flags("branchy", "E+G", "--mode linear", SMALLER),
    same_flags("branchy", "B", "--mode bisect --no-reduce-outputs", SAME),
    same_flags("split", "S", "--mode bisect", SAME),
    same_flags("split", "Q", "--mode linear", SAME),
    same_flags("split", "S", "--mode linear --no-reduce-inputs", ORIGINAL_OUTPUT_KEPT),
    same_flags("split", "T", "--mode bisect --no-reduce-outputs", NO_CONSTANT_OUTPUTS),
    same_flags("split", "N", "--mode bisect", SMALLER),
    same_flags("split", "N", "--mode linear --no-reduce-outputs", NO_CUT_EDGE),
    same_flags("split", "R+Q", "--mode linear", SMALLER),
    same_flags("crossing", "X", "--mode bisect", SAME),
    same_flags("crossing", "J", "--mode linear --no-reduce-inputs", SAME),
    same_flags("crossing", "L", "--mode bisect --no-reduce-inputs", SAME),
    same_flags("crossing", "P", "--mode bisect", SMALLER),
    same_flags("crossing", "Y", "--mode linear --no-reduce-outputs", SMALLER),
    same_flags("crossing", "R+L", "--mode linear", SMALLER),
    # The default mode against Polygraphy's bisect-then-linear.
    Scenario("branchy", (("E", "G"),), (), ("--mode", "bisect+linear"), SMALLER),
    Scenario("crossing", (("Y",),), (), ("--mode", "bisect+linear"), SAME),
    Scenario("split", (("R",),), (), ("--mode", "bisect+linear"), SAME),
    # --fail-regex A B: either expression is the failure; 'first' needs E and F, 'second' H alone.
    Scenario(
        "branchy",
        (("E", "F"), ("H",)),
        ("--fail-regex", "first", "second"),
        ("--mode", "linear", "--fail-regex", "first", "second"),
        SAME,
    ),
]


def check_body(scenario: Scenario) -> str:
    if scenario.ours[:1] == ("--fail-regex",):
        first, second = scenario.culprits
        return "\n".join(
            [
                " && ".join(f'grep -q "Node{n}_" "$1"' for n in first) + ' && echo "first"',
                " && ".join(f'grep -q "Node{n}_" "$1"' for n in second) + ' && echo "second"',
                "exit 0",
            ]
        )
    return fails_when(*scenario.culprits)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_same_answer_as_polygraphy_or_the_documented_difference(tmp_path: Path, scenario: Scenario) -> None:
    model = MODELS[scenario.model]()
    body = check_body(scenario)
    ours, theirs = reduce_with_both(tmp_path, model, body, list(scenario.ours), list(scenario.theirs))
    shown = f"\n  onnx-reducer: {ours.show()}\n  Polygraphy:   {theirs.show()}"
    produced = {name for node in model.graph.node if node.name in ours.nodes for name in node.output}
    read_inside = {name for node in model.graph.node if node.name in ours.nodes for name in node.input}
    originals = {o.name for o in model.graph.output}
    assert not (ours.outputs & read_inside) - originals, f"an output is still read inside{shown}"
    if scenario.expected == SAME:
        assert ours == theirs, shown
    elif scenario.expected == SMALLER:
        assert ours.nodes < theirs.nodes, shown
        assert still_fails(body, tmp_path, tmp_path / "onnx-reducer" / "out.onnx"), shown
    else:
        assert ours.nodes == theirs.nodes, shown
        if scenario.expected == ORIGINAL_OUTPUT_KEPT:
            assert ours.inputs == theirs.inputs and theirs.outputs < ours.outputs, shown
            assert ours.outputs - theirs.outputs <= originals & produced, shown
        elif scenario.expected == NO_CONSTANT_OUTPUTS:
            assert ours.inputs == theirs.inputs and ours.outputs < theirs.outputs == originals, shown
        else:
            assert scenario.expected == NO_CUT_EDGE, scenario.expected
            assert ours.outputs == theirs.outputs and theirs.inputs & produced, shown
            assert not ours.inputs & produced, shown

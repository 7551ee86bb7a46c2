"""Switching from `polygraphy debug reduce` means changing only the command name: every option
Polygraphy's reduce takes is accepted here, and the ones about logging, saving, loading and data
do what they do there."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.workspace import ReduceOptions, initial_values
from examples.build_example_model import build_example_model
from reducer_cli.args import build_parser
from reducer_cli.main import run

MUL_CHECK = ["--fail-regex", "Op: Mul", "--check", "onnx-reducer", "inspect", "polygraphy_debug.onnx"]


def polygraphy_reduce_options() -> set[str]:
    help_text = subprocess.run(
        [str(Path(sys.executable).parent / "polygraphy"), "debug", "reduce", "--help"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return set(re.findall(r"(?m)^\s+(?:-\w, )?(--[a-z0-9-]+)", help_text))


def our_reduce_options() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    reduce = sub.choices["reduce"]  # type: ignore[index]
    return {option for action in reduce._actions for option in action.option_strings}


def test_every_polygraphy_debug_reduce_option_is_accepted() -> None:
    theirs = polygraphy_reduce_options()
    assert len(theirs) > 30, "could not read Polygraphy's options"
    assert sorted(theirs - our_reduce_options()) == []


def weighted_mul_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(256, dtype=np.float32).reshape(1, 256), "W")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "W"], ["m"], name="mul"),
        helper.make_node("Neg", ["m"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_logging_options(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx.save(build_example_model(), "model.onnx")
    assert run(["reduce", "model.onnx", "-o", "r.onnx", "--silent", *MUL_CHECK]) == 0
    assert capsys.readouterr().err == ""
    assert run(["reduce", "model.onnx", "-o", "r.onnx", "--log-file", "log.txt", "--no-progress", *MUL_CHECK]) == 0
    logged = Path("log.txt").read_text()
    assert "iteration" in logged and "Reduction summary" in logged
    err = capsys.readouterr().err
    iteration_lines = [line for line in logged.splitlines() if line.startswith("[I] iteration")]
    assert iteration_lines and all(line in err for line in iteration_lines), "the file gets what stderr gets"

    assert run(["reduce", "model.onnx", "-o", "r.onnx", "--log-format", "timestamp", "--no-progress", *MUL_CHECK]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "[I] iteration" in line]
    assert lines and all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[I\] iteration", line) for line in lines)

    assert run(["reduce", "model.onnx", "-o", "r.onnx", "--verbosity", "WARNING", "--no-progress", *MUL_CHECK]) == 0
    assert "[I]" not in capsys.readouterr().err


def test_save_external_data_options(in_tmp: Path) -> None:
    onnx.save(weighted_mul_model(), "model.onnx")
    # --no-reduce-data: the weight as it is (the Mul fails at any size: the weight step would shrink it)
    args = ["reduce", "model.onnx", "-o", "r.onnx", "--no-progress", "--no-reduce-data", *MUL_CHECK]
    assert run([*args[: -len(MUL_CHECK)], "--save-external-data", *MUL_CHECK]) == 0
    reduced = onnx.load("r.onnx", load_external_data=False)
    assert [t.data_location for t in reduced.graph.initializer] == [TensorProto.EXTERNAL]
    assert Path("r.onnx.data").stat().st_size == 256 * 4
    assert run([*args[:-len(MUL_CHECK)], "--save-external-data", "w.bin", "--external-data-size-threshold", "2K",
                *MUL_CHECK]) == 0  # fmt: skip
    reduced = onnx.load("r.onnx", load_external_data=False)
    assert [t.data_location for t in reduced.graph.initializer] == [TensorProto.DEFAULT], "1 KiB < 2K threshold"
    assert run([*args[:-len(MUL_CHECK)], "--save-external-data", "--no-save-all-tensors-to-one-file",
                *MUL_CHECK]) == 0  # fmt: skip
    assert Path("W").stat().st_size == 256 * 4  # one file per tensor, named after it


def test_fp_to_fp16_reduces_the_converted_model(in_tmp: Path) -> None:
    onnx.save(weighted_mul_model(), "model.onnx")
    assert run(["reduce", "model.onnx", "-o", "r.onnx", "--fp-to-fp16", "--no-progress", *MUL_CHECK]) == 0
    reduced = onnx.load("r.onnx")
    assert [n.op_type for n in reduced.graph.node] == ["Mul"]
    assert reduced.graph.initializer[0].data_type == TensorProto.FLOAT16


def test_ignore_external_data_needs_no_weight_file(in_tmp: Path) -> None:
    onnx.save(weighted_mul_model(), "model.onnx", save_as_external_data=True, location="gone.data", size_threshold=0)
    Path("gone.data").unlink()
    assert run(["reduce", "model.onnx", "-o", "r.onnx", "--no-progress", *MUL_CHECK]) == 4  # the weights are missing
    assert run(["reduce", "model.onnx", "-o", "r.onnx", "--ignore-external-data", "--no-progress", *MUL_CHECK]) == 0
    assert [n.op_type for n in onnx.load("r.onnx", load_external_data=False).graph.node] == ["Mul"]


def test_data_loader_options_give_the_values_used_for_fallback_and_freezing(tmp_path: Path) -> None:
    model = weighted_mul_model()
    script = tmp_path / "loader.py"
    script.write_text("import numpy as np\ndef my_data():\n    yield {'x': np.full((1, 256), 7.0, np.float32)}\n")
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=np.zeros((1, 256), np.float32))
    base = {"model": tmp_path / "m.onnx", "work_dir": tmp_path}

    ranged = initial_values(ReduceOptions(**base, val_ranges={"": (2.0, 3.0)}), model)["x"]  # type: ignore[arg-type]
    assert ranged.shape == (1, 256) and ranged.min() >= 2.0 and ranged.max() <= 3.0
    per_input = initial_values(ReduceOptions(**base, val_ranges={"": (0.0, 1.0), "x": (5.0, 6.0)}), model)  # type: ignore[arg-type]
    assert per_input["x"].min() >= 5.0
    scripted = initial_values(
        ReduceOptions(**base, data_loader_script=f"{script}:my_data", load_inputs=[inputs]),
        model,  # type: ignore[arg-type]
    )
    assert float(scripted["x"][0, 0]) == 7.0, "the script overrides the other data options"
    loaded = initial_values(ReduceOptions(**base, load_inputs=[inputs], val_ranges={"": (2.0, 3.0)}), model)  # type: ignore[arg-type]
    assert float(loaded["x"].max()) == 0.0, "--load-inputs wins over generated values"

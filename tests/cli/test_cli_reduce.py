"""``onnx-reducer reduce`` end to end on real models: reduce options, outputs, artifacts, replay,
exit codes and the summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from tests.cli.helpers import (
    ITER,
    LOG,
    checks_logged,
    fails_when_present,
    node,
    node_names,
    reduce,
    save_branchy,
    write_script,
)
from tests.models import FLOAT, IR_VERSION, make_model, random_feeds

SCRIPT = "check.sh"


def io_names(path: str) -> tuple[list[str], list[str]]:
    model = onnx.load(path)
    initializers = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initializers], [o.name for o in model.graph.output]


def assert_runs(path: str) -> None:
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, random_feeds(model))


def run_script(check: list[str], model: str) -> int:
    """Run a check script on ``model`` the way the reducer does (it reads the iteration path)."""
    Path(ITER).write_bytes(Path(model).read_bytes())
    return subprocess.run(check, check=False).returncode


def _reduce_branchy_until(culprit: str, *options: str) -> None:
    """Reduce the branchy model to r.onnx with a check that fails while ``culprit`` is in it."""
    check = write_script(SCRIPT, fails_when_present(culprit))
    assert reduce(save_branchy(), "-o", "r.onnx", *options, check=check) == 0


@pytest.mark.parametrize("mode", ["auto", "bisect", "linear", "minimize"])
def test_no_reduce_inputs_keeps_the_original_graph_inputs(in_tmp: Path, mode: str) -> None:
    _reduce_branchy_until(node("H"), "--no-reduce-inputs", "--mode", mode)
    # H's upstream cone: B, E (b and e), G (g); everything reads only graph inputs.
    assert sorted(node_names("r.onnx")) == sorted(node(x) for x in "BEGH")
    inputs, _ = io_names("r.onnx")
    assert sorted(inputs) == ["x0", "y0"]
    assert_runs("r.onnx")


@pytest.mark.parametrize("mode", ["auto", "bisect", "linear", "minimize"])
def test_no_reduce_outputs_keeps_the_original_graph_outputs(in_tmp: Path, mode: str) -> None:
    _reduce_branchy_until(node("E"), "--no-reduce-outputs", "--mode", mode)
    # E's downstream cone: H and F; its only output is out1, an original output.
    assert sorted(node_names("r.onnx")) == sorted(node(x) for x in "EFH")
    _, outputs = io_names("r.onnx")
    assert outputs == ["out1"]
    assert_runs("r.onnx")


def test_without_constraints_a_middle_node_gets_new_inputs_and_outputs(in_tmp: Path) -> None:
    """The counterpart of the two tests above (same culprit): the default does cut both sides."""
    _reduce_branchy_until(node("H"))
    assert node_names("r.onnx") == [node("H")]
    assert io_names("r.onnx") == (["e", "g"], ["h"])
    assert_runs("r.onnx")


def split_model() -> onnx.ModelProto:
    split = numpy_helper.from_array(np.array([1, 1], dtype=np.int64), name="split")
    nodes = [
        helper.make_node("Neg", ["x"], ["n"], name="NodeNeg_"),
        helper.make_node("Split", ["n", "split"], ["s0", "s1"], name="NodeSplit_", axis=0),
        helper.make_node("Relu", ["s0"], ["r"], name="NodeRelu_"),
        helper.make_node("Sigmoid", ["s1"], ["q"], name="NodeSigmoid_"),
    ]
    graph = helper.make_graph(
        nodes,
        "split",
        [helper.make_tensor_value_info("x", FLOAT, [2, 3])],
        [helper.make_tensor_value_info(name, FLOAT, [1, 3]) for name in ("s0", "s1", "r", "q")],
        initializer=[split],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


@pytest.mark.parametrize("mode", ["auto", "bisect"])
def test_a_node_with_several_graph_outputs_keeps_them_all(in_tmp: Path, mode: str) -> None:
    onnx.save(split_model(), "model.onnx")
    check = write_script(SCRIPT, fails_when_present("NodeSplit_"))
    assert reduce("model.onnx", "-o", "r.onnx", "--mode", mode, check=check) == 0
    assert node_names("r.onnx") == ["NodeSplit_"]
    assert io_names("r.onnx") == (["n"], ["s0", "s1"])
    assert_runs("r.onnx")


def test_constant_nodes_are_lowered_so_the_result_has_no_spurious_inputs(in_tmp: Path) -> None:
    scale = numpy_helper.from_array(np.full((2, 3), 3.0, dtype=np.float32))
    nodes = [
        helper.make_node("Constant", [], ["k"], name="NodeConst_", value=scale),
        helper.make_node("Relu", ["x"], ["r"], name="NodeRelu_"),
        helper.make_node("Mul", ["r", "k"], ["m"], name="NodeMul_"),
        helper.make_node("Tanh", ["m"], ["y"], name="NodeTanh_"),
    ]
    onnx.save(make_model(nodes, ["x"], ["y"]), "model.onnx")
    check = write_script(SCRIPT, fails_when_present("NodeMul_"))
    assert reduce("model.onnx", "-o", "r.onnx", check=check) == 0
    assert node_names("r.onnx") == ["NodeMul_"]
    inputs, _ = io_names("r.onnx")
    assert inputs == ["r"]
    np.testing.assert_array_equal(numpy_helper.to_array(onnx.load("r.onnx").graph.initializer[0]), 3.0)
    assert_runs("r.onnx")


def test_min_good_is_written_and_passes(in_tmp: Path) -> None:
    check = write_script(SCRIPT, fails_when_present(node("C"), node("E")))
    assert reduce(save_branchy(), "-o", "bad.onnx", "--min-good", "good.onnx", check=check) == 0
    assert sorted(node_names("bad.onnx")) == [node("C"), node("E")]
    good = node_names("good.onnx")
    assert 0 < len(good) <= 2 and sorted(good) != sorted(node_names("bad.onnx"))
    assert run_script(check, "good.onnx") == 0
    assert run_script(check, "bad.onnx") == 1
    assert_runs("good.onnx")
    assert_runs("bad.onnx")


def test_artifacts_are_sorted_into_good_and_bad_with_the_iteration_number(in_tmp: Path) -> None:
    # The check also leaves a log file behind, which --artifacts moves (not copies).
    body = f'echo "checked $1" > check_output.txt\n{fails_when_present(node("D"))}'
    check = write_script(SCRIPT, body)
    code = reduce(
        save_branchy(),
        "-o",
        "r.onnx",
        "--artifacts",
        ITER,
        "check_output.txt",
        "--artifacts-dir",
        "arts",
        "--summary-json",
        "s.json",
        check=check,
    )
    assert code == 0
    checks = checks_logged()
    good = sorted(p.name for p in Path("arts/good").iterdir())
    bad = sorted(p.name for p in Path("arts/bad").iterdir())
    assert len(good) + len(bad) == 2 * checks
    assert "polygraphy_debug_iter1.onnx" in bad and "check_output_iter1.txt" in bad  # the original
    summary = json.loads(Path("s.json").read_text())
    for it in summary["iterations"]:
        if it["cached"]:
            continue
        folder = "bad" if it["verdict"] == "fail" else "good"
        model = f"arts/{folder}/polygraphy_debug_iter{it['number']}.onnx"
        assert len(onnx.load(model).graph.node) == it["nodes"]
        assert Path(f"arts/{folder}/check_output_iter{it['number']}.txt").exists()
        has_culprit = node("D") in node_names(model)
        assert has_culprit == (folder == "bad")
    assert not Path("check_output.txt").exists(), "non-model artifacts are moved"


def test_iter_info_is_written_before_each_check(in_tmp: Path) -> None:
    body = f"cat iter.json >> info.log; echo >> info.log\n{fails_when_present(node('B'))}"
    check = write_script(SCRIPT, body)
    assert reduce(save_branchy(), "-o", "r.onnx", "--iter-info", "iter.json", check=check) == 0
    infos = [json.loads(line) for line in Path("info.log").read_text().splitlines() if line.strip()]
    assert [i["iteration"] for i in infos] == list(range(1, checks_logged() + 1))
    assert infos[0]["nodes"] == 8
    assert all(1 <= i["nodes"] <= 8 for i in infos)


def test_debug_replay_resumes_without_rerunning_checks(in_tmp: Path) -> None:
    check = write_script(SCRIPT, fails_when_present(node("A"), node("H")))
    first = "first.json"
    assert (
        reduce(
            save_branchy(), "-o", "r1.onnx", "--save-debug-replay", "replay.json", "--summary-json", first, check=check
        )
        == 0
    )
    first_checks = checks_logged()
    assert json.loads(Path(first).read_text())["checks_run"] == first_checks
    replay = json.loads(Path("replay.json").read_text())
    assert len(replay["verdicts"]) == first_checks

    Path(LOG).unlink()
    code = reduce(
        "model.onnx",
        "-o",
        "r2.onnx",
        "--load-debug-replay",
        "replay.json",
        "--summary-json",
        "second.json",
        check=check,
    )
    assert code == 0
    assert checks_logged() == 0, "no finished check is run again"
    assert json.loads(Path("second.json").read_text())["checks_run"] == 0
    assert node_names("r2.onnx") == node_names("r1.onnx")
    assert sorted(node_names("r2.onnx")) == [node("A"), node("H")]


def test_an_interrupted_reduction_resumes_from_its_replay(in_tmp: Path) -> None:
    """The 4th check interrupts the tool (SIGINT to its parent, as Ctrl-C would); the resumed run
    re-runs only that check and those after it."""
    save_branchy()
    culprit = fails_when_present(node("F"))
    # The 4th check waits to be killed: the tool ends it when it handles the SIGINT, however long
    # that takes on a loaded machine (a check that slept a fixed time could finish first).
    check = write_script(SCRIPT, f'[ "$(wc -l < {LOG})" -eq 4 ] && kill -INT $PPID && sleep 600\n{culprit}')
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    base = [Path(sys.executable).parent / "onnx-reducer", "reduce", "model.onnx", "-o", "r.onnx", "--no-progress"]
    first = subprocess.run(
        [*map(str, base), "--check", *check], capture_output=True, text=True, env=env, check=False, timeout=300
    )
    assert first.returncode == 130, first.stderr
    assert "--load-debug-replay" in first.stderr
    assert len(json.loads(Path("onnx_reducer_debug_replay.json").read_text())["verdicts"]) == 3
    assert not Path("r.onnx").exists()

    resumed = [*map(str, base), "--load-debug-replay", "onnx_reducer_debug_replay.json", "--summary-json", "s.json"]
    second = subprocess.run([*resumed, "--check", *check], capture_output=True, text=True, env=env, check=False)
    assert second.returncode == 0, second.stderr
    assert node_names("r.onnx") == [node("F")]
    summary = json.loads(Path("s.json").read_text())
    assert summary["checks_run"] == checks_logged() - 4
    assert summary["cache_hits"] >= 3

    # A clean run of the same reduction needs exactly the checks of both runs minus the interrupted one.
    Path(LOG).unlink()
    clean = write_script("clean.sh", culprit)
    assert reduce("model.onnx", "-o", "clean.onnx", "--save-debug-replay", "clean.json", check=clean) == 0
    assert checks_logged() == summary["checks_run"] + 3


def test_replay_of_another_check_is_refused(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _reduce_branchy_until(node("A"))
    other = write_script("other.sh", fails_when_present(node("B")))
    code = reduce("model.onnx", "-o", "r.onnx", "--load-debug-replay", "onnx_reducer_debug_replay.json", check=other)
    assert code == 1
    assert "another check" in capsys.readouterr().err


def test_original_model_that_passes_exits_3_with_a_clear_message(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check = write_script(SCRIPT, "exit 0")
    assert reduce(save_branchy(), "-o", "r.onnx", check=check) == 3
    err = capsys.readouterr().err
    assert "original model did not fail the check in 4 runs" in err
    assert checks_logged() == 4  # 3 more runs: a flaky check may pass the original once
    assert not Path("r.onnx").exists()
    assert not Path(ITER).exists()


@pytest.mark.parametrize("content", [b"this is not a model", b"\x08\x96\x01\xff\xff\xff"])
def test_a_non_onnx_file_exits_4(in_tmp: Path, capsys: pytest.CaptureFixture[str], content: bytes) -> None:
    Path("model.onnx").write_bytes(content)
    check = write_script(SCRIPT, "exit 1")
    assert reduce("model.onnx", "-o", "r.onnx", check=check) == 4
    assert "[E]" in capsys.readouterr().err
    assert checks_logged() == 0


def test_a_missing_model_file_is_an_error_not_a_traceback(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check = write_script(SCRIPT, "exit 1")
    assert reduce("missing.onnx", "-o", "r.onnx", check=check) == 2  # bad usage, as for every command
    assert "missing.onnx" in capsys.readouterr().err


def test_summary_line_reports_nodes_checks_and_cache_hits(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _reduce_branchy_until(node("G"), "--summary-json", "s.json")
    err = capsys.readouterr().err
    summary = json.loads(Path("s.json").read_text())
    assert summary["nodes_before"] == 8 and summary["nodes_after"] == 1
    assert summary["checks_run"] == checks_logged()
    assert "==== Reduction summary ====" in err
    assert "nodes before: 8  after: 1" in err
    assert f"checks run: {checks_logged()}  cache hits: {summary['cache_hits']}" in err
    assert "original failure: fail [exit=1]" in err
    # One log line per iteration: number, phase, candidate size, verdict, check time.
    lines = [line for line in err.splitlines() if line.startswith("[I] iteration")]
    assert len(lines) == len(summary["iterations"])  # the original's record included
    assert "candidate      8 nodes" in lines[0]
    assert f"Minimal failing nodes: Abs:{node('G')}" in err


def test_without_output_options_it_is_a_usage_error(in_tmp: Path) -> None:
    check = write_script(SCRIPT, "exit 1")
    assert reduce(save_branchy(), check=check) == 2
    assert checks_logged() == 0


def test_iteration_artifact_is_removed_unless_asked_to_keep_it(in_tmp: Path) -> None:
    check = write_script(SCRIPT, fails_when_present(node("A")))
    assert reduce(save_branchy(), "-o", "r.onnx", "--iter-artifact", "it.onnx", check=[check[0], "it.onnx"]) == 0
    assert node_names("r.onnx") == [node("A")]
    assert not Path("it.onnx").exists()
    assert (
        reduce(
            "model.onnx",
            "-o",
            "r.onnx",
            "--iter-artifact",
            "it.onnx",
            "--no-remove-intermediate",
            check=[check[0], "it.onnx"],
        )
        == 0
    )
    assert Path("it.onnx").exists()

"""Verified answers through ``onnx-reducer reduce`` (issue 17): every model written is a file the
check judged byte for byte, or it is checked once more as written; a final check that disagrees
is not success (exit 11); a check that fails whatever the model is called out (exit 10), and a
check that depends on the model is not (exit 0, no warning)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from reducer_cli.args import EXIT_OK, EXIT_SUSPECT, EXIT_UNVERIFIED
from reducer_core.graph import GraphIndex
from reducer_core.verification import checker_crash, identity_model
from tests.cli.helpers import ITER, checks_logged, fails_when_present, node, reduce, save_branchy, write_script
from tests.models import weighted_model

JUDGED_LOG = "judged.log"
ITER_IN_WORK = "work/polygraphy_debug.onnx"


def sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def judged_shas() -> set[str]:
    """sha256 of every model file a check read (the scripts below log them)."""
    return {line.split()[0] for line in Path(JUDGED_LOG).read_text().splitlines()}


def logging_check(body: str) -> list[str]:
    """A shell check that logs the sha256 of the file it judges, then runs ``body``."""
    return write_script("check.sh", f'sha256sum "$1" >> {JUDGED_LOG}\n{body}')


def summary(path: str = "summary.json") -> dict[str, object]:
    data: dict[str, object] = json.loads(Path(path).read_text())
    return data


# -- verified outputs --------------------------------------------------------------------------------


def test_written_models_are_bytes_the_check_judged_at_no_extra_check(in_tmp: Path) -> None:
    check = logging_check(fails_when_present(node("E")))
    code = reduce(
        save_branchy(), "-o", "bad.onnx", "--min-good", "good.onnx", "--summary-json", "summary.json", check=check
    )
    assert code == EXIT_OK
    data = summary()
    verified = data["verified"]
    assert isinstance(verified, dict)
    assert verified["min_bad"] == {"status": "judged", "sha256": sha256("bad.onnx"), "checks": 0}
    assert verified["min_good"] == {"status": "judged", "sha256": sha256("good.onnx"), "checks": 0}
    assert {sha256("bad.onnx"), sha256("good.onnx")} <= judged_shas(), "the check read these very bytes"
    assert checks_logged() == data["checks_run"], "verifying cost no check"
    assert data["suspect"] is None


def test_a_model_with_weights_is_checked_once_more_as_written(in_tmp: Path) -> None:
    onnx.save(weighted_model(), "model.onnx")
    check = logging_check(fails_when_present(node("Q")))
    code = reduce(
        "model.onnx", "-o", "bad.onnx", "--min-good", "good.onnx", "--summary-json", "summary.json", check=check
    )
    assert code == EXIT_OK
    data = summary()
    verified = data["verified"]
    assert isinstance(verified, dict)
    for name, path, verdict in (("min_bad", "bad.onnx", "fail"), ("min_good", "good.onnx", "pass")):
        assert verified[name]["status"] == "rechecked", verified
        assert verified[name]["checks"] == 1 and verified[name]["verdict"] == verdict
        assert verified[name]["sha256"] == sha256(path) and sha256(path) in judged_shas()
    assert not onnx.load("bad.onnx", load_external_data=False).graph.initializer[0].external_data, "self-contained"
    assert checks_logged() == data["checks_run"] + 2
    assert [n.name for n in onnx.load("bad.onnx").graph.node] == [node("Q")]


def test_a_final_check_that_disagrees_is_not_success(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The check fails only while the weights are stored by reference (it greps the weight file's
    name): the self-contained file passes when checked as written. The run says so; exit 11."""
    onnx.save(weighted_model(), "model.onnx")
    body = 'grep -q "NodeQ_" "$1" && grep -q "polygraphy_debug.weights" "$1" && exit 1\nexit 0'
    check = logging_check(body)
    code = reduce("model.onnx", "-o", "bad.onnx", "--summary-json", "summary.json", check=check)
    assert code == EXIT_UNVERIFIED
    verified = summary()["verified"]
    assert isinstance(verified, dict)
    assert verified["min_bad"]["status"] == "disagrees" and verified["min_bad"]["verdict"] == "pass"
    err = capsys.readouterr().err
    assert "did not fail like the original when checked once more as written" in err
    assert "(NOT verified)" in err


# -- a check that fails whatever the model ------------------------------------------------------------


def test_a_check_script_with_a_typo_in_its_path_is_called_out(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("check.py").write_text("import sys\nsys.exit(0)\n")
    check = [sys.executable, "chek.py", ITER]  # the typo
    code = reduce(save_branchy(), "-o", "bad.onnx", "--summary-json", "summary.json", check=check)
    assert code == EXIT_SUSPECT
    suspect = summary()["suspect"]
    assert isinstance(suspect, dict)
    assert suspect["evidence"] == "trivial-model-fails"
    assert "Python cannot open the check script" in str(suspect["crash"])
    assert "can't open file" in str(suspect["output"])
    err = capsys.readouterr().err
    assert "The check fails regardless of the model" in err and "can't open file" in err


def test_a_check_script_that_raises_is_called_out(in_tmp: Path) -> None:
    Path("check.py").write_text("import sys\nconfig = {}\nthreshold = config['threshold']\nsys.exit(0)\n")
    check = [sys.executable, str(in_tmp / "check.py"), ITER]
    code = reduce(save_branchy(), "-o", "bad.onnx", "--jobs", "2", "--summary-json", "summary.json", check=check)
    assert code == EXIT_SUSPECT
    suspect = summary()["suspect"]
    assert isinstance(suspect, dict)
    assert "exception raised in the check script" in str(suspect["crash"]) and "KeyError" in str(suspect["crash"])
    assert "Traceback" in str(suspect["output"])


def test_a_model_dependent_check_gets_exit_0_and_no_warning(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("check.py").write_text(
        "import sys, onnx\n"
        "model = onnx.load(sys.argv[1])\n"
        "if any(n.op_type == 'Max' for n in model.graph.node):\n"
        "    raise RuntimeError('Max is broken')\n"
    )
    check = [sys.executable, str(in_tmp / "check.py"), ITER]
    code = reduce(save_branchy(), "-o", "bad.onnx", "--summary-json", "summary.json", check=check)
    assert code == EXIT_OK
    data = summary()
    assert data["suspect"] is None
    assert "regardless of the model" not in capsys.readouterr().err
    assert [n.name for n in onnx.load("bad.onnx").graph.node] == [node("H")]


def test_a_check_failing_on_every_candidate_but_not_on_a_trivial_model_is_not_flagged(in_tmp: Path) -> None:
    """Polygraphy's semantics stay: every candidate fails (each has a node), the answer stands; the
    one extra check on a trivial model passes, so nothing is flagged."""
    check = logging_check(fails_when_present("Node"))
    code = reduce(save_branchy(), "-o", "bad.onnx", "--summary-json", "summary.json", check=check)
    assert code == EXIT_OK
    data = summary()
    assert data["suspect"] is None
    assert checks_logged() == data["checks_run"] + 1, "one preflight check, on the trivial model"


# -- the pieces --------------------------------------------------------------------------------------


def test_the_trivial_model_has_the_inputs_and_runs() -> None:
    model = weighted_model()
    trivial = identity_model(GraphIndex.build(model))
    onnx.checker.check_model(trivial)
    assert [i.name for i in trivial.graph.input] == ["x"] and not trivial.graph.initializer
    session = ort.InferenceSession(trivial.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = np.ones((1, 128), dtype=np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": feed})[0], feed)


def test_the_trivial_model_of_a_model_with_identity_nodes_has_none() -> None:
    """A check may look for Identity nodes (``op-present``): then the trivial model has no node."""
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"], name="id")],
        "ids",
        [info("x", TensorProto.FLOAT, [2])],
        [info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    trivial = identity_model(GraphIndex.build(model))
    onnx.checker.check_model(trivial)
    assert not trivial.graph.node
    assert [i.name for i in trivial.graph.input] == [o.name for o in trivial.graph.output] == ["x"]
    session = ort.InferenceSession(trivial.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"x": np.ones(2, dtype=np.float32)})[0], np.ones(2))


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("python3: can't open file '/w/tools/chek.py': [Errno 2] No such file or directory", "cannot open"),
        (
            "Traceback (most recent call last):\n  File \"x.py\", line 1\nModuleNotFoundError: No module named 'foo'",
            "import",
        ),
        ("sh: 1: polygrafy: not found", "not found"),
        ("Traceback (most recent call last):\n  File \"/w/check.py\", line 3, in <module>\nKeyError: 't'", "KeyError"),
    ],
)
def test_checker_crash_names_the_checks_own_crash(output: str, expected: str) -> None:
    found = checker_crash(output)
    assert found is not None and expected in found


def test_a_runtime_error_is_not_the_checks_own_crash() -> None:
    runtime = (
        "Traceback (most recent call last):\n"
        '  File "/w/check.py", line 5, in <module>\n'
        '  File "/venv/lib/python3.12/site-packages/onnxruntime/capi/session.py", line 220, in run\n'
        "onnxruntime.capi.onnxruntime_pybind11_state.Fail: [ONNXRuntimeError] : 1 : FAIL : Max failed"
    )
    assert checker_crash(runtime) is None
    assert checker_crash("mismatch: max abs error 3.2 > atol 1e-3") is None


def test_a_model_with_external_data_is_checked_with_its_data_beside_it(in_tmp: Path) -> None:
    onnx.save(weighted_model(), "model.onnx")
    check = logging_check(fails_when_present(node("Q")))
    code = reduce(
        "model.onnx",
        "-o",
        "out/bad.onnx",
        "--save-external-data",
        "--summary-json",
        "summary.json",
        "--no-reduce-data",  # the weights as they are (shrunk, they would be inline: no data file)
        check=check,
    )
    assert code == EXIT_OK
    verified = summary()["verified"]
    assert isinstance(verified, dict) and verified["min_bad"]["status"] == "rechecked"
    assert Path("out/bad.onnx.data").is_file() and not Path("bad.onnx.data").exists(), "the link beside it is gone"
    session = ort.InferenceSession("out/bad.onnx", providers=["CPUExecutionProvider"])
    assert [n.name for n in onnx.load("out/bad.onnx").graph.node] == [node("Q")] and session.get_inputs()


def test_a_data_file_never_replaces_another_file_beside_the_artifact(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The written model's data file has the name of a file of the user's beside the iteration
    artifact: that file is left alone, and the written model is reported as not verified."""
    onnx.save(weighted_model(), "model.onnx")
    Path("work").mkdir()
    Path("work/weights.bin").write_bytes(b"the user's own file")
    script = logging_check(fails_when_present(node("Q")))[0]
    options = ["-o", "out/bad.onnx", "--iter-artifact", ITER_IN_WORK, "--save-external-data", "weights.bin"]
    options.append("--no-reduce-data")  # the weights as they are (shrunk, they would be inline: no data file)
    code = reduce("model.onnx", *options, check=[script, ITER_IN_WORK])
    assert code == EXIT_UNVERIFIED
    assert Path("work/weights.bin").read_bytes() == b"the user's own file"
    assert "cannot be checked once more as written" in capsys.readouterr().err

"""``onnx-reducer reduce --jobs N --devices ...``: several checks at once give the answer and the
files of one at a time; each slot runs its check in its own folder with its own device; a
Polygraphy-style command keeps working; an interrupted parallel run resumes; bad options are
refused clearly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from reducer_cli.main import run
from reducer_cli.slots import SLOTS_DIR
from reducer_core.strategies import MODES
from tests.checks.processes import running
from tests.cli.helpers import ALL_NODES, ITER, node, node_names, reduce, save_branchy
from tests.cli.test_polygraphy_compat import weighted_mul_model

LOG_ENV = "PARALLEL_TEST_LOG"
HANG_AFTER_ENV = "PARALLEL_TEST_HANG_AFTER"  # runs logged after the first N hang
HANG_UNLESS_ENV = "PARALLEL_TEST_HANG_UNLESS"  # runs hang unless all these names are in the model
CHECK = """import json, os, sys, time
artifact = sys.argv[1]
data = open(artifact, "rb").read()
line = {"cwd": os.getcwd(), "device": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid(),
        "artifact_here": os.path.isfile(artifact) and not os.path.isabs(artifact)}
log = os.environ.get("PARALLEL_TEST_LOG", os.path.join(os.path.dirname(os.path.realpath(__file__)), "runs.jsonl"))
with open(log, "a") as f:
    f.write(json.dumps(line) + "\\n")
hang_after = int(os.environ.get("PARALLEL_TEST_HANG_AFTER", "0"))
started = [json.loads(l)["pid"] for l in open(log).read().splitlines()]
if hang_after and started.index(os.getpid()) >= hang_after:  # by the order the runs logged
    time.sleep(120)
unless = os.environ.get("PARALLEL_TEST_HANG_UNLESS", "").split()
if unless and not all(name.encode() in data for name in unless):
    time.sleep(120)
sys.exit(1 if all(name.encode() in data for name in sys.argv[2:]) else 0)
"""


@pytest.fixture
def check_log(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The check script (``check.py`` in the working folder) and the file it logs every run to."""
    Path("check.py").write_text(CHECK)
    log = in_tmp / "runs.jsonl"
    monkeypatch.setenv(LOG_ENV, str(log))
    return log


def check_argv(*culprits: str) -> list[str]:
    """Fails when every culprit node is in the iteration model; a relative script path, as a
    user would type it in the working folder (slots must mirror it)."""
    return [sys.executable, "check.py", ITER, *(node(c) for c in culprits)]


def runs(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def summary(path: str) -> dict[str, object]:
    result: dict[str, object] = json.loads(Path(path).read_text())
    return result


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("culprits", ["F", "AH"])
def test_four_slots_give_the_answer_and_files_of_one(check_log: Path, mode: str, culprits: str) -> None:
    model = save_branchy()
    check = check_argv(*culprits)
    one = ["--mode", mode, "--summary-json", "one.json", "--save-debug-replay", "one-replay.json"]
    assert reduce(model, "-o", "one.onnx", "--min-good", "one-good.onnx", *one, check=check) == 0
    four = ["--mode", mode, "--jobs", "4", "--summary-json", "four.json", "--save-debug-replay", "four-replay.json"]
    assert reduce(model, "-o", "four.onnx", "--min-good", "four-good.onnx", *four, check=check) == 0

    assert Path("four.onnx").read_bytes() == Path("one.onnx").read_bytes()
    assert Path("four-good.onnx").read_bytes() == Path("one-good.onnx").read_bytes()
    assert sorted(node_names("four.onnx")) == sorted(node(c) for c in culprits)
    sequential, parallel = summary("one.json"), summary("four.json")
    assert parallel["min_bad_nodes"] == sequential["min_bad_nodes"]
    assert (parallel["jobs"], sequential["jobs"]) == (4, 1)
    assert sequential["speculative_checks"] == 0
    started = len(runs(check_log)) - int(str(sequential["checks_run"]))
    killed = started - int(str(parallel["checks_run"]))
    assert 0 <= killed <= 3, "only speculative checks still running at the end are killed, not counted"
    # Every verdict checked ahead is in the replay too (a resumed run would not check it again).
    assert len(json.loads(Path("four-replay.json").read_text())["verdicts"]) == parallel["checks_run"]
    assert not Path(SLOTS_DIR).exists(), "slot folders are removed like the iteration artifact"


def test_each_slot_runs_in_its_own_folder_with_its_own_device(check_log: Path) -> None:
    code = reduce(
        save_branchy(), "-o", "r.onnx", "--jobs", "3", "--devices", "5,6,GPU-1a2b", "--no-remove-intermediate",
        check=check_argv("A", "H"),
    )  # fmt: skip
    assert code == 0
    seen = runs(check_log)
    here = Path.cwd().resolve()
    mirrored = here.relative_to(here.anchor)  # each slot's working folder: the same path below its root
    by_slot = {Path(str(run["cwd"])).relative_to(here / SLOTS_DIR): run["device"] for run in seen}
    assert by_slot == {
        Path("slot1") / mirrored: "5",
        Path("slot2") / mirrored: "6",
        Path("slot3") / mirrored: "GPU-1a2b",
    }, "every slot ran, each with its device"
    assert all(run["artifact_here"] for run in seen), "polygraphy_debug.onnx is in the check's own folder"
    assert not Path(ITER).exists(), "nothing is written to the shared working folder"
    kept = Path(SLOTS_DIR) / "slot1" / mirrored
    assert (kept / ITER).is_file() and (kept / "model.onnx").is_file(), "with --no-remove-intermediate they stay"
    assert (kept / "check.py").read_text() == CHECK and not (kept / "check.py").is_symlink(), "small files: copies"


def test_devices_alone_set_one_slot_per_device_and_one_device_runs_sequentially(check_log: Path) -> None:
    model = save_branchy()
    assert reduce(model, "-o", "r.onnx", "--devices", "2,3", "--summary-json", "s.json", check=check_argv("F")) == 0
    assert summary("s.json")["jobs"] == 2 and summary("s.json")["devices"] == ["2", "3"]
    assert {run["device"] for run in runs(check_log)} == {"2", "3"}
    check_log.unlink()
    assert reduce(model, "-o", "r1.onnx", "--devices", "7", check=check_argv("F")) == 0
    assert {run["device"] for run in runs(check_log)} == {"7"}
    assert {run["cwd"] for run in runs(check_log)} == {str(Path.cwd())}, "one slot: today's working folder"


def test_a_polygraphy_style_command_sees_its_artifact_and_weights_in_each_slot(in_tmp: Path) -> None:
    """``onnx-reducer inspect polygraphy_debug.onnx`` loads the model and its external weights
    from the slot's folder (the command line of Polygraphy's example, unchanged)."""
    onnx.save(weighted_mul_model(), "model.onnx", save_as_external_data=True, location="model.data", size_threshold=0)
    check = ["--fail-regex", "Op: Mul", "--check", "onnx-reducer", "inspect", ITER]
    argv = ["reduce", "model.onnx", "-o", "r.onnx", "--no-progress", "--summary-json", "s.json", "--jobs", "2"]
    assert run([*argv, *check]) == 0
    assert [n.op_type for n in onnx.load("r.onnx").graph.node] == ["Mul"]
    assert summary("s.json")["jobs"] == 2


def wait_for(condition: Callable[[], bool], timeout_s: float = 300.0) -> None:
    """Wait for ``condition``; the deadline only bounds a broken run (a loaded machine is slow)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def test_an_interrupted_parallel_run_kills_its_checks_and_resumes(check_log: Path) -> None:
    """Ctrl-C (SIGINT) while checks run: every running check is killed, the verdicts so far
    (speculative ones included) are in the replay, and the resumed run ends as a clean one."""
    model = save_branchy()
    replay = "onnx_reducer_debug_replay.json"
    tool = [str(Path(sys.executable).parent / "onnx-reducer"), "reduce", model, "--no-progress", "--jobs", "4"]
    check = ["--check", *check_argv("A", "H")]
    hanging = {**os.environ, HANG_AFTER_ENV: "4"}
    first = subprocess.Popen([*tool, "-o", "r.onnx", *check], env=hanging, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: len(runs(check_log)) >= 5)  # four finish, the ones after them hang
        wait_for(lambda: Path(replay).exists() and len(json.loads(Path(replay).read_text())["verdicts"]) == 4)
        first.send_signal(signal.SIGINT)
        _, stderr = first.communicate(timeout=300)
    finally:  # a failed wait must not leave the tool running into the next test
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 130, stderr
    assert b"--load-debug-replay" in stderr
    assert not any(running(int(str(run["pid"]))) for run in runs(check_log)), "no check outlives the tool"
    assert len(json.loads(Path(replay).read_text())["verdicts"]) == 4
    assert not Path("r.onnx").exists()

    resumed = [*tool, "-o", "r.onnx", "--load-debug-replay", replay, "--summary-json", "resumed.json", *check]
    second = subprocess.run(resumed, capture_output=True, check=False)
    assert second.returncode == 0, second.stderr
    assert summary("resumed.json")["cache_hits"] >= 1
    clean = [*tool, "-o", "clean.onnx", "--save-debug-replay", "clean.json", *check]
    assert subprocess.run(clean, capture_output=True, check=False).returncode == 0
    assert Path("r.onnx").read_bytes() == Path("clean.onnx").read_bytes()
    assert sorted(node_names("r.onnx")) == [node("A"), node("H")]


def test_checks_still_running_when_the_original_passes_are_killed(
    check_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The original passes while speculative checks (which hang) run: exit 3, none left running."""
    monkeypatch.setenv(HANG_UNLESS_ENV, " ".join(ALL_NODES))  # only the full model answers
    code = reduce(save_branchy(), "-o", "r.onnx", "--jobs", "4", check=check_argv("Z"))
    assert code == 3
    started = runs(check_log)
    assert len(started) >= 2, "speculative checks ran beside the original"
    assert not any(running(int(str(run["pid"]))) for run in started)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--jobs", "0"], "--jobs 0: give the number of checks"),
        (["--jobs", "4", "--devices", "0,1"], "--devices lists 2 device(s) for --jobs 4"),
        (["--devices", "0,,1"], "'' is not a device"),
        (["--jobs", "2", "--iter-artifact", "/tmp/x.onnx"], "--iter-artifact /tmp/x.onnx: with --jobs above 1"),
        (["--jobs", "2", "--iter-info", "../info.json"], "--iter-info ../info.json: with --jobs above 1"),
    ],
)
def test_bad_parallel_options_are_usage_errors(
    check_log: Path, capsys: pytest.CaptureFixture[str], options: list[str], message: str
) -> None:
    assert reduce(save_branchy(), "-o", "r.onnx", *options, check=check_argv("F")) == 2
    assert message in capsys.readouterr().err
    assert not check_log.exists(), "refused before any check ran"


def test_interactive_mode_refuses_several_jobs(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert reduce(save_branchy(), "-o", "r.onnx", "--jobs", "2") == 2
    assert "interactive mode" in capsys.readouterr().err


def test_a_foreign_slots_folder_is_never_removed(check_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path(SLOTS_DIR).mkdir()
    Path(SLOTS_DIR, "mine.txt").write_text("user data")
    assert reduce(save_branchy(), "-o", "r.onnx", "--jobs", "2", check=check_argv("F")) == 2
    assert "was not made by onnx-reducer" in capsys.readouterr().err
    assert Path(SLOTS_DIR, "mine.txt").read_text() == "user data"


def test_a_command_spec_with_repeats_runs_in_slots_like_one_at_a_time(check_log: Path) -> None:
    """``--check-spec`` of kind command (``{model}``: the slot's artifact), repeated: same answer,
    and the device reaches the spec's child environment (an allow-listed ``CUDA_`` variable)."""
    script = str(Path("check.py").resolve())
    culprits = ", ".join(f'"{node(c)}"' for c in "AH")
    Path("spec.yaml").write_text(f'kind: command\ncommand: ["{sys.executable}", "{script}", "{{model}}", {culprits}]\n'
                                 "repeat: 2\nfail_if: all\n")  # fmt: skip
    model = save_branchy()
    assert reduce(model, "-o", "one.onnx", "--check-spec", "spec.yaml") == 0
    sequential = len(runs(check_log))
    assert reduce(model, "-o", "two.onnx", "--check-spec", "spec.yaml", "--devices", "3,4") == 0
    assert Path("two.onnx").read_bytes() == Path("one.onnx").read_bytes()
    assert {run["device"] for run in runs(check_log)[sequential:]} == {"3", "4"}
    assert sorted(node_names("two.onnx")) == [node("A"), node("H")]

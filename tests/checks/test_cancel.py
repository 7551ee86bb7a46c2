"""The stop scope (``checks.cancel``): a running check of any kind is killed, with every process it
started, soon after the scope asks to stop; outside a scope nothing is polled."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from checks.build import build_check
from checks.cancel import CheckStoppedError, stop_checks_when
from checks.spec import ModelCheck, parse_check_spec
from tests.checks.conftest import COMPARE_FP16
from tests.checks.processes import wait_gone

# The command leaves a grandchild in a session of its own (which the check's own group kill would
# miss) and records its pid, then waits.
ESCAPING = "setsid sleep 60 & echo $! > {pids}; sleep 60"


def _seconds_to_stop(check: ModelCheck, model: Path, after_s: float | None) -> float:
    """Runs ``check`` on ``model`` in a stop scope that asks to stop ``after_s`` seconds in (None:
    from the start); the check must raise CheckStoppedError. How long it ran."""
    started = time.monotonic()
    with (
        stop_checks_when(lambda: after_s is None or time.monotonic() - started > after_s),
        pytest.raises(CheckStoppedError),
    ):
        check.run(model)
    return time.monotonic() - started


def test_a_stopped_command_check_and_its_escaped_grandchild_are_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    spec = parse_check_spec(f"kind: command\ncommand: [sh, -c, '{ESCAPING.format(pids=pids)}']\ntimeout: 120")
    assert _seconds_to_stop(build_check(spec, work_dir=tmp_path), tmp_path / "model.onnx", after_s=1.0) < 5
    assert wait_gone([int(pids.read_text())], within_s=30.0)  # it sleeps 60 s


def test_a_stopped_spec_check_in_its_child_interpreter_is_killed(tmp_path: Path) -> None:
    """compare runs in ``python -m checks.child``; the stop kills it (here while it starts up)."""
    (tmp_path / "model.onnx").write_bytes(b"")
    assert _seconds_to_stop(build_check(parse_check_spec(COMPARE_FP16)), tmp_path / "model.onnx", after_s=None) < 5


def test_the_stop_also_ends_the_repeats_of_a_check(tmp_path: Path) -> None:
    sleeper = f"['{sys.executable}', -c, 'import time; time.sleep(30)']"
    spec = parse_check_spec(f"kind: command\ncommand: {sleeper}\nrepeat: 3")
    assert _seconds_to_stop(build_check(spec, work_dir=tmp_path), tmp_path / "model.onnx", after_s=0.5) < 5


def test_outside_a_scope_a_check_runs_to_its_end(tmp_path: Path) -> None:
    with stop_checks_when(lambda: True):
        pass  # a finished scope leaves nothing behind
    spec = parse_check_spec("kind: command\ncommand: [sh, -c, 'sleep 0.5; exit 3']")
    verdict, _ = build_check(spec, work_dir=tmp_path).run(tmp_path / "model.onnx")
    assert verdict.kind.value == "fail" and verdict.signature == "exit=3"


def test_a_command_check_runs_in_its_work_folder(tmp_path: Path) -> None:
    spec = parse_check_spec("kind: command\ncommand: [sh, -c, 'test -e here.txt']")
    (tmp_path / "here.txt").write_text("")
    verdict, _ = build_check(spec, work_dir=tmp_path).run(tmp_path / "model.onnx")
    assert verdict.kind.value == "pass"

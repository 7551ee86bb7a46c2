"""A flaky check end to end: a Python check script that fails on the culprit with p = 0.7, drawn
afresh on every run (a repeat of the same candidate gets a new draw). The reduction ends at the
single culprit, says "flaky: fails ~N % of runs" in the log and puts the estimate in the summary.

The check is ``tests/flaky_check.py``: its draws come from ``random.Random`` seeded by the test's
seed, the iteration model's bytes and how many times those bytes were checked before, so a run is
reproducible. The seeds are cases
where the check's first verdict on a candidate holding the culprit was a false pass that, before
flakiness was handled, left a second node in the answer (seed 3: a pass that contained a failing
candidate shows the inconsistency; seed 6: nothing else is inconsistent, the default confirmation
of a 2-3-node answer shows it, and ``--no-confirm-flaky`` ends at the 2 nodes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import ITER, node, node_names, reduce, save_branchy
from tests.flaky_check import command


def flaky_check(seed: int, culprit: str = node("C"), p: float = 0.7) -> list[str]:
    return command(ITER, culprit, p, seed, Path("runs.log"))


@pytest.mark.parametrize(("seed", "options"), [(3, ()), (6, ()), (6, ("--confirm-flaky",))])
def test_flaky_check_ends_at_the_single_culprit_and_reports_the_rate(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], seed: int, options: tuple[str, ...]
) -> None:
    argv = ("-o", "r.onnx", "--fail-regex", "FLAKY-FAIL", "--summary-json", "s.json", *options)
    assert reduce(save_branchy(), *argv, check=flaky_check(seed)) == 0
    assert node_names("r.onnx") == [node("C")]
    summary = json.loads(Path("s.json").read_text())
    flaky = summary["flaky"]
    assert flaky["status"] == "flaky"
    assert 0 < flaky["fails_percent"] < 100
    assert flaky["evidence"] and flaky["rechecks"] > 0
    runs = Path("runs.log").read_text().split()
    assert len(runs) == summary["checks_run"] > len(set(runs))  # some candidates were re-checked
    log = capsys.readouterr().err
    assert f"flaky: fails ~{flaky['fails_percent']} % of runs" in log


def test_deterministic_check_reports_no_flakiness(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("-o", "r.onnx", "--fail-regex", "FLAKY-FAIL", "--summary-json", "s.json")
    assert reduce(save_branchy(), *argv, check=flaky_check(3, p=1.0)) == 0
    assert node_names("r.onnx") == [node("C")]
    summary = json.loads(Path("s.json").read_text())
    assert summary["flaky"] is None
    runs = Path("runs.log").read_text().split()
    assert len(runs) == len(set(runs)) == summary["checks_run"]  # nothing checked twice
    assert "flaky:" not in capsys.readouterr().err


def test_no_confirm_flaky_takes_a_small_answer_as_it_is(in_tmp: Path) -> None:
    argv = ("-o", "r.onnx", "--fail-regex", "FLAKY-FAIL", "--summary-json", "s.json", "--no-confirm-flaky")
    assert reduce(save_branchy(), *argv, check=flaky_check(6)) == 0
    names = node_names("r.onnx")
    assert len(names) == 2 and node("C") in names  # the one-node candidate's false pass stands
    summary = json.loads(Path("s.json").read_text())
    assert summary["flaky"] is None
    runs = Path("runs.log").read_text().split()
    assert len(runs) == len(set(runs)) == summary["checks_run"]  # nothing checked twice


def _seen_before(log: Path) -> None:
    """A line in the check's log before the run: its first run (the original) draws a coin too,
    instead of always failing (``tests/flaky_check.py``), so the original may pass."""
    log.write_text("earlier-run\n")


@pytest.mark.parametrize(("seed", "options"), [(2, ()), (7, ()), (2, ("--jobs", "2"))])
def test_a_flaky_original_that_passed_first_is_run_again_and_reduced(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], seed: int, options: tuple[str, ...]
) -> None:
    """Seeds 2 and 7: the original's first run passes (before: "the original model did not fail");
    its second run fails, the check is flaky from the start and the answer is the culprit. A replay
    saved on the way reaches the same answer without running a check."""
    _seen_before(Path("runs.log"))
    argv = ("-o", "r.onnx", "--fail-regex", "FLAKY-FAIL", "--summary-json", "s.json", *options)
    replay = ("--save-debug-replay", "replay.json")
    assert reduce(save_branchy(), *argv, *replay, check=flaky_check(seed)) == 0, capsys.readouterr().err
    assert node_names("r.onnx") == [node("C")]
    summary = json.loads(Path("s.json").read_text())
    originals = [i for i in summary["iterations"] if i["phase"] == "original"]
    assert [i["verdict"] for i in originals] == ["pass", "fail"]
    assert summary["flaky"]["status"] == "flaky"
    assert summary["flaky"]["evidence"][0]["kind"] == "repeat-differs"
    checked = Path("runs.log").read_text()
    again = ("-o", "r2.onnx", "--fail-regex", "FLAKY-FAIL", "--load-debug-replay", "replay.json")
    assert reduce(save_branchy(), *again, check=flaky_check(seed)) == 0
    assert node_names("r2.onnx") == [node("C")]
    assert Path("runs.log").read_text() == checked  # the replay answered every check

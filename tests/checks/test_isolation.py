"""Checks run in a fresh child process group: a segfault is a crash verdict, a hang a timeout."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from checks.build import build_check
from checks.isolated import IsolatedSpecCheck, RepeatedCheck, run_isolated
from checks.spec import parse_check_spec
from reducer_core.verdict import Verdict, VerdictKind

OP_SPEC = parse_check_spec("kind: op-present\nops: [Mul]\ntimeout: 1.5")


def test_a_segfaulting_check_is_a_crash_verdict(tmp_path: Path) -> None:
    check = IsolatedSpecCheck(OP_SPEC, entry="tests.checks.helpers:segfault")
    verdict, _ = check.run(tmp_path / "unused.onnx")
    assert verdict.kind is VerdictKind.CRASH
    assert verdict.signature == "signal=SIGSEGV"


def test_a_hanging_check_is_killed_and_is_a_timeout_verdict(tmp_path: Path) -> None:
    started = time.monotonic()
    verdict, _ = IsolatedSpecCheck(OP_SPEC, entry="tests.checks.helpers:hang").run(tmp_path / "unused.onnx")
    assert verdict.kind is VerdictKind.TIMEOUT
    assert time.monotonic() - started < 10


def test_a_broken_harness_is_an_infra_error_not_a_verdict_on_the_model() -> None:
    verdict, output = run_isolated({"entry": "tests.checks.helpers:broken"}, 30)
    assert verdict.kind is VerdictKind.INFRA_ERROR
    assert "harness is broken" in verdict.detail and "Traceback" in output


FLAKY = """\
import pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
sys.exit(1 if n % 3 != 1 else 0)
"""


@pytest.mark.parametrize(("fail_if", "fails"), [("any", True), ("majority", True), ("all", False)])
def test_a_flaky_check_with_repeat_and_fail_if(tmp_path: Path, fail_if: str, fails: bool) -> None:
    """The command fails on runs 1 and 3 of every 3 (a 2/3 failure rate)."""
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    counter = tmp_path / "count"
    spec = parse_check_spec(
        f"kind: command\ncommand: [{sys.executable!r}, {str(script)!r}, {str(counter)!r}]\n"
        f"repeat: 3\nfail_if: {fail_if}\ntimeout: 30"
    )
    check = build_check(spec)
    assert isinstance(check, RepeatedCheck)
    verdict, _ = check.run(tmp_path / "model.onnx")
    assert check.last_rate == (2, 3)
    assert verdict.is_failure is fails
    assert "failed 2/3 runs" in verdict.detail
    if fails:
        assert verdict.signature == "exit=1"


@dataclass
class ScriptedCheck:
    """A check that answers with the given verdicts in turn."""

    verdicts: list[Verdict]
    identity: str = "scripted"

    def run(self, model_path: Path) -> tuple[Verdict, str]:
        return self.verdicts.pop(0), ""


def test_repeated_check_reports_the_most_common_failure_family() -> None:
    """One crash and two command failures matching different listed regexes: the two command
    failures are one family (Polygraphy's alternatives), so they outvote the crash."""
    runs = [
        Verdict(VerdictKind.CRASH, "signal=SIGSEGV"),
        Verdict(VerdictKind.FAIL, "regex=first"),
        Verdict(VerdictKind.FAIL, "regex=second"),
    ]
    verdict, _ = RepeatedCheck(ScriptedCheck(runs), repeat=3).run(Path("model.onnx"))
    assert (verdict.kind, verdict.signature) == (VerdictKind.FAIL, "regex=first")
    assert "failed 3/3 runs" in verdict.detail

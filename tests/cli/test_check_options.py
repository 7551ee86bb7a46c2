"""--check semantics (Polygraphy's): non-zero exit fails, --fail-code, --ignore-fail-code,
--fail-regex over stdout and stderr (a match fails even with exit 0), --check-timeout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks.command import CommandCheck
from reducer_core.verdict import VerdictKind
from tests.cli.helpers import checks_logged, node, node_names, reduce, save_branchy, write_script

SCRIPT = "check.sh"


def _kept(body: str, *options: str) -> list[str]:
    """Reduce the branchy model with a check script running ``body`` and ``options``: the nodes kept."""
    assert reduce(save_branchy(), "-o", "r.onnx", *options, check=write_script(SCRIPT, body)) == 0
    return node_names("r.onnx")


@pytest.mark.parametrize("mode", ["auto", "bisect"])
def test_non_zero_exit_fails_by_default(in_tmp: Path, mode: str) -> None:
    check = write_script(SCRIPT, f'grep -q "{node("H")}" "$1" && exit 1\nexit 0')
    assert reduce(save_branchy(), "-o", "reduced.onnx", "--mode", mode, check=check) == 0
    assert node_names("reduced.onnx") == [node("H")]


def test_fail_code_counts_only_the_listed_codes(in_tmp: Path) -> None:
    # E exits 3 (not listed: a pass), F exits 7 (listed: a failure).
    body = f'grep -q "{node("F")}" "$1" && exit 7\ngrep -q "{node("E")}" "$1" && exit 3\nexit 0'
    check = write_script(SCRIPT, body)
    summary = "summary.json"
    code = reduce(save_branchy(), "-o", "reduced.onnx", "--fail-code", "7", "--summary-json", summary, check=check)
    assert code == 0
    assert node_names("reduced.onnx") == [node("F")]
    assert json.loads(Path(summary).read_text())["original"]["signature"] == "exit=7"


def test_fail_code_with_a_regex_needs_both(in_tmp: Path) -> None:
    # F: code 5 and the message; D: code 5 without the message (a pass); H: the message, exit 0 (a pass).
    body = "\n".join(
        [
            f'grep -q "{node("F")}" "$1" && {{ echo "BOOM in F"; exit 5; }}',
            f'grep -q "{node("D")}" "$1" && exit 5',
            f'grep -q "{node("H")}" "$1" && {{ echo "BOOM in H"; exit 0; }}',
            "exit 0",
        ]
    )
    assert _kept(body, "--fail-code", "5", "--fail-regex", "BOOM") == [node("F")]


def test_ignored_fail_code_counts_as_a_pass(in_tmp: Path) -> None:
    # F exits 7; B exits 3 (ignored). With --any-failure, any other non-zero exit would count.
    body = f'grep -q "{node("F")}" "$1" && exit 7\ngrep -q "{node("B")}" "$1" && exit 3\nexit 0'
    assert _kept(body, "--any-failure", "--ignore-fail-code", "3") == [node("F")]


def test_without_ignore_the_other_code_is_a_failure_under_any_failure(in_tmp: Path) -> None:
    """The counterpart of the test above: it is --ignore-fail-code that makes exit 3 a pass."""
    body = f'grep -q "{node("B")}" "$1" && exit 3\ngrep -q "{node("F")}" "$1" && exit 7\nexit 0'
    assert _kept(body, "--any-failure") == [node("B")]


def test_original_failing_only_with_an_ignored_code_is_not_a_failure(in_tmp: Path) -> None:
    check = write_script(SCRIPT, "exit 3")
    assert reduce(save_branchy(), "-o", "r.onnx", "--ignore-fail-code", "3", check=check) == 3
    assert checks_logged() == 4  # a passing original is run 3 more times (a flaky failure) before it is refused
    assert not Path("r.onnx").exists()


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_fail_regex_matches_stdout_or_stderr_even_with_exit_zero(in_tmp: Path, stream: str) -> None:
    redirect = " >&2" if stream == "stderr" else ""
    body = f'if grep -q "{node("E")}" "$1"; then echo "found Op: Mul here"{redirect}; fi\necho "all fine"\nexit 0'
    assert _kept(body, "--fail-regex", r"Op: Mu.") == [node("E")]


def test_fail_regex_without_a_match_passes_even_with_a_non_zero_exit(in_tmp: Path) -> None:
    # Everything exits 1, only D prints the message: the exit code alone is not a failure.
    body = f'grep -q "{node("D")}" "$1" && echo "ERROR: D"\nexit 1'
    assert _kept(body, "--fail-regex", "ERROR", "--mode", "minimize") == [node("D")]


def test_any_of_several_regexes_fails(in_tmp: Path) -> None:
    body = f'grep -q "{node("G")}" "$1" && echo "second pattern"\nexit 0'
    assert _kept(body, "--fail-regex", "first", "second") == [node("G")]


def test_check_timeout_is_its_own_verdict(in_tmp: Path) -> None:
    """A check that hangs whenever node C is present: the original times out, so the reduction
    reduces the timeout (C alone), and each hanging check is killed after --check-timeout."""
    check = write_script(SCRIPT, f'grep -q "{node("C")}" "$1" && exec sleep 30\nexit 0')
    summary = "summary.json"
    code = reduce(
        save_branchy(),
        "-o",
        "r.onnx",
        "--check-timeout",
        "0.5",
        "--mode",
        "auto",
        "--summary-json",
        summary,
        check=check,
    )
    assert code == 0
    assert node_names("r.onnx") == [node("C")]
    data = json.loads(Path(summary).read_text())
    assert data["original"]["kind"] == "timeout"
    verdicts = {it["verdict"] for it in data["iterations"]}
    assert verdicts == {"timeout", "pass"}
    assert data["elapsed_s"] < 15, "hanging checks were killed, not waited for"


def test_timeout_kills_the_whole_process_group(in_tmp: Path) -> None:
    # The shell starts a grandchild that holds stdout open; killing only the shell would hang.
    check = CommandCheck(["sh", "-c", "sleep 30 & sleep 30; echo done"], timeout_s=0.5)
    verdict, _ = check.run()
    assert verdict.kind is VerdictKind.TIMEOUT
    assert verdict.duration_s < 10


def test_a_check_that_cannot_start_is_an_infrastructure_error(in_tmp: Path) -> None:
    code = reduce(save_branchy(), "-o", "r.onnx", check=["/nonexistent/check-binary", "x"])
    assert code == 1
    assert not Path("r.onnx").exists()


def test_a_check_killed_by_a_signal_is_a_crash() -> None:
    verdict, _ = CommandCheck(["sh", "-c", "kill -SEGV $$"]).run()
    assert verdict.kind is VerdictKind.CRASH
    assert verdict.signature == "signal=SIGSEGV"


def test_strict_pinning_keeps_the_original_exit_code(in_tmp: Path) -> None:
    """F fails with exit 2 on the original; candidates without F but with B fail with exit 9.
    Only with --pin-signature strict is exit 9 another failure, so the result is F."""
    body = f'grep -q "{node("F")}" "$1" && exit 2\ngrep -q "{node("B")}" "$1" && exit 9\nexit 0'
    assert _kept(body, "--pin-signature", "strict") == [node("F")]


def test_by_default_another_exit_code_is_the_same_failure(in_tmp: Path) -> None:
    """Polygraphy counts any non-zero exit: B alone (exit 9) reproduces F's failure (exit 2), and
    B is the only single node that fails, so the default reduction ends at B, with no verdict
    changed by pinning."""
    body = f'grep -q "{node("B")}" "$1" && grep -q "{node("F")}" "$1" && exit 2\n'
    body += f'grep -q "{node("B")}" "$1" && exit 9\nexit 0'
    check = write_script(SCRIPT, body)
    summary = "summary.json"
    assert reduce(save_branchy(), "-o", "r.onnx", "--summary-json", summary, check=check) == 0
    assert node_names("r.onnx") == [node("B")]
    assert json.loads(Path(summary).read_text())["pinned_out"] == 0


def test_pinning_refuses_a_signal_crash_for_a_failure_that_exited(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """F exits 2 on the original; candidates with B but without F die by SIGSEGV: another bug, so
    they do not count; the summary counts them and their log lines say so. --any-failure counts
    them (Polygraphy's verdict)."""
    body = f'grep -q "{node("F")}" "$1" && exit 2\ngrep -q "{node("B")}" "$1" && kill -SEGV $$\nexit 0'
    check = write_script(SCRIPT, body)
    summary = "summary.json"
    assert reduce(save_branchy(), "-o", "r.onnx", "--summary-json", summary, check=check) == 0
    assert node_names("r.onnx") == [node("F")]
    pinned = json.loads(Path(summary).read_text())["pinned_out"]
    err = capsys.readouterr().err
    assert pinned >= 1
    assert err.count("pinned out: signal=SIGSEGV") >= pinned
    assert f"pinned out: {pinned}" in err
    assert reduce(save_branchy(), "-o", "any.onnx", "--any-failure", "--summary-json", summary, check=check) == 0
    assert json.loads(Path(summary).read_text())["pinned_out"] == 0
    assert node_names("any.onnx") in ([node("B")], [node("F")])


def test_every_listed_regex_is_the_same_failure(in_tmp: Path) -> None:
    """--fail-regex first second: 'first' needs E and F together, 'second' needs H alone. The
    original prints both. Polygraphy counts either expression, so the default ends at H; with
    --pin-signature strict only 'first' counts and the result keeps E and F."""
    body = "\n".join(
        [
            f'grep -q "{node("E")}" "$1" && grep -q "{node("F")}" "$1" && echo "first"',
            f'grep -q "{node("H")}" "$1" && echo "second"',
            "exit 0",
        ]
    )
    check = write_script(SCRIPT, body)
    summary = "summary.json"
    options = ["--fail-regex", "first", "second", "--summary-json", summary]
    assert reduce(save_branchy(), "-o", "r.onnx", *options, check=check) == 0
    assert node_names("r.onnx") == [node("H")]
    assert json.loads(Path(summary).read_text())["pinned_out"] == 0
    assert reduce(save_branchy(), "-o", "strict.onnx", *options, "--pin-signature", "strict", check=check) == 0
    assert sorted(node_names("strict.onnx")) == sorted([node("E"), node("F")])
    assert json.loads(Path(summary).read_text())["pinned_out"] >= 1


def test_a_signal_death_is_a_pass_when_fail_codes_do_not_list_it() -> None:
    """Polygraphy: with --fail-code, any other return code counts as a success."""
    verdict, _ = CommandCheck(["sh", "-c", "kill -SEGV $$"], fail_codes=[7]).run()
    assert verdict.kind is VerdictKind.PASS
    verdict, _ = CommandCheck(["sh", "-c", "kill -SEGV $$"], fail_codes=[-11]).run()
    assert verdict.kind is VerdictKind.FAIL


@pytest.mark.parametrize(
    ("option", "fail_shown", "pass_shown"),
    [(None, True, False), ("--hide-fail-output", False, False), ("--show-output", True, True)],
)
def test_check_output_display(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], option: str | None, fail_shown: bool, pass_shown: bool
) -> None:
    body = f'if grep -q "{node("D")}" "$1"; then echo "FAILING-RUN"; exit 1; fi\necho "PASSING-RUN"\nexit 0'
    check = write_script(SCRIPT, body)
    options = [option] if option else []
    assert reduce(save_branchy(), "-o", "r.onnx", *options, check=check) == 0
    err = capsys.readouterr().err
    assert ("FAILING-RUN" in err) == fail_shown
    assert ("PASSING-RUN" in err) == pass_shown


def test_a_matched_regex_pins_the_failure_whatever_the_exit_code(in_tmp: Path) -> None:
    """With --fail-regex alone the regex is the signature: the same message with another exit
    code (a wrapper that exits 1 or 2 depending on the subgraph) still reproduces the failure."""
    # F causes BOOM; the exit code is 2 while A is also present (the full model), 1 without it.
    body = "\n".join(
        [
            f'grep -q "{node("F")}" "$1" || exit 0',
            'echo "BOOM"',
            f'grep -q "{node("A")}" "$1" && exit 2',
            "exit 1",
        ]
    )
    check = write_script(SCRIPT, body)
    summary = "summary.json"
    code = reduce(save_branchy(), "-o", "r.onnx", "--fail-regex", "BOOM", "--summary-json", summary, check=check)
    assert code == 0
    assert json.loads(Path(summary).read_text())["original"]["signature"] == "regex=BOOM"
    assert node_names("r.onnx") == [node("F")]


def test_a_passing_original_tells_check_spec_users_what_to_change_in_the_spec(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("spec.yaml").write_text("kind: op-present\nops: [Conv]\n")
    assert reduce(save_branchy(), "-o", "reduced.onnx", "--check-spec", "spec.yaml") == 3
    err = capsys.readouterr().err
    assert "Make the check spec fail on the full model" in err
    assert "adjust --fail-code" not in err


def test_a_passing_original_tells_check_users_about_fail_code_and_regex(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert reduce(save_branchy(), "-o", "reduced.onnx", check=write_script(SCRIPT, "exit 0")) == 3
    assert "adjust --fail-code/--fail-regex" in capsys.readouterr().err

"""Interactive mode (no --check): the tool asks whether each iteration model passed or failed."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tests.cli.helpers import ITER, node, node_names, reduce, save_branchy


class FakeUser(io.StringIO):
    """Standard input of a person who answers 'f' when the culprits are in the iteration model;
    records the answers so that they can be replayed."""

    def __init__(self, *culprits: str, junk_first: bool = False) -> None:
        super().__init__()
        self.culprits = set(culprits)
        self.answers: list[str] = []
        self.junk_first = junk_first

    def readline(self, size: int | None = -1) -> str:
        if self.junk_first:
            self.junk_first = False
            return "maybe?\n"
        present = {n.name for n in onnx.load(ITER).graph.node}
        answer = "f" if self.culprits <= present else "p"
        self.answers.append(answer)
        return ("FAIL" if answer == "f" else "Pass") + "\n"  # the first letter counts, any case


@pytest.mark.parametrize("mode", ["auto", "bisect", "linear", "minimize"])
def test_interactive_answers_drive_the_reduction(in_tmp: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    user = FakeUser(node("E"))
    monkeypatch.setattr(sys, "stdin", user)
    assert reduce(save_branchy(), "-o", "r.onnx", "--mode", mode) == 0
    assert node_names("r.onnx") == [node("E")]
    assert user.answers[0] == "f", "the original model is asked about first"


def test_interactive_prompts_again_on_an_unclear_answer(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", FakeUser(node("C"), node("D"), junk_first=True))
    assert reduce(save_branchy(), "-o", "r.onnx") == 0
    assert sorted(node_names("r.onnx")) == [node("C"), node("D")]
    err = capsys.readouterr().err
    assert f"Did '{ITER}' [p]ass or [f]ail?" in err
    assert err.count("Please choose either: 'p' or 'f':") == 1


def test_interactive_original_pass_exits_3(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("p\n"))
    assert reduce(save_branchy(), "-o", "r.onnx") == 3
    assert not Path("r.onnx").exists()


def test_interactive_without_answers_is_a_clear_error(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Standard input closes after the original's answer: an error message, not a traceback."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("f\n"))
    assert reduce(save_branchy(), "-o", "r.onnx") == 1
    assert "--check" in capsys.readouterr().err
    assert not Path("r.onnx").exists()


def test_interactive_console_script_with_answers_on_stdin(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed console script, answers piped in: the same answers give the same result."""
    user = FakeUser(node("H"))
    monkeypatch.setattr(sys, "stdin", user)
    assert reduce(save_branchy(), "-o", "expected.onnx", "--save-debug-replay", "in_process.json") == 0
    script = Path(sys.executable).parent / "onnx-reducer"
    proc = subprocess.run(
        [str(script), "reduce", "model.onnx", "-o", "r.onnx", "--no-progress"],
        input="".join(f"{a}\n" for a in user.answers),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert node_names("r.onnx") == node_names("expected.onnx") == [node("H")]
    assert proc.stderr.count("[p]ass or [f]ail?") == len(user.answers)


def test_a_person_is_not_asked_again_to_confirm_a_small_answer_unless_asked(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default confirmation of 2-3-node answers re-checks candidates; with interactive verdicts
    that would ask a person the same question again, so it is off unless ``--confirm-flaky``."""
    asked: dict[tuple[str, ...], int] = {}
    for options in [(), ("--no-confirm-flaky",), ("--confirm-flaky",)]:
        user = FakeUser(node("C"), node("E"))
        monkeypatch.setattr(sys, "stdin", user)
        assert reduce(save_branchy(), "-o", "r.onnx", *options) == 0
        assert sorted(node_names("r.onnx")) == sorted([node("C"), node("E")])
        asked[options] = len(user.answers)
    assert asked[()] == asked[("--no-confirm-flaky",)]
    assert asked[("--confirm-flaky",)] == asked[()] + 3

"""What a new user trips on at the command line (issue 20): the version, one meaning per exit code,
read-only places, the token hint and the phase legend."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reducer_cli.args import EXIT_INVALID_MODEL, EXIT_USAGE
from reducer_cli.main import run


def test_version_names_the_package_and_its_runtimes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run(["--version"])
    assert exited.value.code == 0
    assert re.fullmatch(r"onnx-reducer \d+\.\d+\.\d+\S* \(onnx \S+, onnxruntime \S+\)\n", capsys.readouterr().out)


MISSING = "Model file 'missing.onnx' does not exist. Check the path (a relative path starts from the current folder)."


@pytest.mark.parametrize(
    "argv",
    [
        ["reduce", "missing.onnx", "-o", "r.onnx", "--check", "true"],
        ["precision", "missing.onnx", "-o", "r.onnx", "--check-spec", "spec.yaml"],
        ["golden", "missing.onnx", "-o", "golden.zip"],
        ["inspect", "missing.onnx"],
        ["submit", "missing.onnx", "--check-spec", "spec.yaml", "--server", "http://127.0.0.1:9", "--token", "t"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_missing_model_is_bad_usage_with_one_wording_for_every_command(
    in_tmp: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    Path("spec.yaml").write_text("kind: error\n")
    assert run(argv) == EXIT_USAGE
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"[E] {MISSING}"


def test_an_unreadable_model_is_exit_4_for_golden_as_for_reduce(in_tmp: Path) -> None:
    Path("garbage.onnx").write_bytes(b"not a model")
    assert run(["golden", "garbage.onnx", "-o", "golden.zip"]) == EXIT_INVALID_MODEL
    assert run(["reduce", "garbage.onnx", "-o", "r.onnx", "--check", "true", "--no-progress"]) == EXIT_INVALID_MODEL


def test_serve_help_names_the_home_folder_as_readme_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run(["--help"])
    overview = " ".join(capsys.readouterr().out.split())
    assert "ONNX_REDUCER_HOME" in overview and "SQLite, ./data" not in overview
    with pytest.raises(SystemExit):
        run(["serve", "--help"])
    serve = " ".join(capsys.readouterr().out.split())
    assert "~/.local/share/onnx-reducer" in serve and "token create" in serve

"""What a new user trips on at the command line (issue 20): the version, one meaning per exit code,
read-only places, the token hint and the phase legend."""

from __future__ import annotations

import re

import pytest

from reducer_cli.main import run


def test_version_names_the_package_and_its_runtimes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run(["--version"])
    assert exited.value.code == 0
    assert re.fullmatch(r"onnx-reducer \d+\.\d+\.\d+\S* \(onnx \S+, onnxruntime \S+\)\n", capsys.readouterr().out)

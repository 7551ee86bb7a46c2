"""What ``bisect-passes`` and ``bisect-releases`` share (``reducer_cli.bisect_args``): a
``--bundle`` that is no zip is refused before any check or environment runs, by both commands,
saying what to give; the answer goes into the bundle in place of an earlier one, the rest kept."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import onnx
import pytest

from engine.report_bundle import put_answer
from reducer_cli.main import run
from tests.pass_models import fusion_model


@pytest.mark.parametrize(
    "command",
    [
        ["bisect-releases", "--runtime-env", "1.20=/nowhere/python", "--runtime-env", "1.21=/nowhere/python"],
        ["bisect-passes"],
    ],
)
def test_a_bundle_that_is_no_zip_is_refused_first(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("kind: op-present\nops: [Gelu]\ntarget: {runtime: onnxruntime}\n")
    (tmp_path / "notes.txt").write_text("not a bundle")
    onnx.save(fusion_model(), str(tmp_path / "model.onnx"))
    argv = [command[0], str(tmp_path / "model.onnx"), "--check-spec", str(spec), *command[1:]]
    assert run([*argv, "--bundle", str(tmp_path / "notes.txt")]) == 2
    err = capsys.readouterr().err
    assert "--bundle" in err and "is no zip; give the file reduce --bundle wrote" in err


def test_the_answer_replaces_an_earlier_one_and_keeps_the_rest(tmp_path: Path) -> None:
    bundle = tmp_path / "bug.zip"
    with zipfile.ZipFile(bundle, "w") as archive:
        archive.writestr("repro.py", "print('hi')\n")
        archive.writestr("passes.json", "{}")
    put_answer(bundle, "passes.json", {"optimizers": ["GeluFusionL2"]})
    put_answer(bundle, "releases.json", {"first_failing": "1.21"})
    with zipfile.ZipFile(bundle) as archive:
        assert sorted(archive.namelist()) == ["passes.json", "releases.json", "repro.py"]
        assert json.loads(archive.read("passes.json")) == {"optimizers": ["GeluFusionL2"]}
        assert archive.read("repro.py") == b"print('hi')\n"
    assert not (tmp_path / "bug.zip.partial").exists()

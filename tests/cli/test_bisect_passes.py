"""``onnx-reducer bisect-passes``: the optimizer behind a failure, on the original or on the
min-bad of a reduction (the default when given), with real onnxruntime checks."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import zipfile
from pathlib import Path

import onnx
import pytest

from reducer_cli.main import run
from tests.pass_models import FUSED_MATMUL_FUSION, GELU_FUSION, fusion_model, optimized_op_spec

pytest.importorskip("onnxruntime")


@pytest.fixture
def fusion_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    monkeypatch.chdir(tmp_path)
    onnx.save(fusion_model(), "model.onnx")
    Path("fused.yaml").write_text(optimized_op_spec("FusedMatMul"))
    Path("gelu.yaml").write_text(optimized_op_spec("Gelu"))
    return "model.onnx", "fused.yaml"


def test_the_fusion_is_named_on_the_min_bad_of_a_reduction(
    fusion_files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    model, _ = fusion_files
    spec = "gelu.yaml"  # (a FusedMatMul min-bad may come from another fusion: MatMul then a scalar Mul)
    assert run(["reduce", model, "-o", "min_bad.onnx", "--check-spec", spec]) == 0
    assert len(onnx.load("min_bad.onnx").graph.node) < len(fusion_model().graph.node)
    capsys.readouterr()
    code = run(["bisect-passes", model, "--check-spec", spec, "--min-bad", "min_bad.onnx", "--summary-json", "s.json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert f"disabled_optimizers: [{GELU_FUSION}]" in out.out
    summary = json.loads(Path("s.json").read_text())
    assert summary["task"] == "bisect-passes" and summary["on"] == "min-bad"
    assert summary["outcome"] == "optimizers" and summary["optimizers"] == [GELU_FUSION]
    assert summary["verified"] and summary["first_failing_level"] == "extended"
    bound = math.ceil(math.log2(max(len(summary["candidates"]), 1))) + 2  # every check, the no-optimizer one too
    assert summary["checks"] <= bound == summary["check_bound"]


def test_on_the_original_with_its_three_candidates(
    fusion_files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    model, spec = fusion_files
    assert run(["bisect-passes", model, "--check-spec", spec, "--summary-json", "s.json"]) == 0
    summary = json.loads(Path("s.json").read_text())
    assert summary["on"] == "original" and len(summary["candidates"]) == 3
    assert summary["optimizers"] == [FUSED_MATMUL_FUSION]
    assert summary["checks"] <= 1 + math.ceil(math.log2(3)) + 2
    assert "first appears at level extended" in capsys.readouterr().err


def test_a_failure_without_optimizer_and_a_passing_check(fusion_files: tuple[str, str]) -> None:
    model, _ = fusion_files
    Path("matmul.yaml").write_text(optimized_op_spec("MatMul"))
    assert run(["bisect-passes", model, "--check-spec", "matmul.yaml", "--summary-json", "s.json"]) == 0
    summary = json.loads(Path("s.json").read_text())
    assert summary["outcome"] == "no-optimizer" and summary["checks"] == 1
    Path("absent.yaml").write_text(optimized_op_spec("LayerNormalization"))
    assert run(["bisect-passes", model, "--check-spec", "absent.yaml"]) == 3


def test_min_bad_asked_for_but_not_given_is_usage(
    fusion_files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    model, spec = fusion_files
    assert run(["bisect-passes", model, "--check-spec", spec, "--on", "min-bad"]) == 2
    assert "--min-bad MODEL" in capsys.readouterr().err


def test_the_bundle_reproduces_the_fusion_and_its_repro_names_the_optimizer(fusion_files: tuple[str, str]) -> None:
    """op-present on the optimized graph in the bundle's repro.py (it used to look into the file,
    where no fused op is: not reproduced), and bisect-passes --bundle puts its answer there."""
    model, _ = fusion_files
    assert run(["reduce", model, "-o", "min_bad.onnx", "--check-spec", "gelu.yaml", "--bundle", "bug.zip"]) == 0
    bisect = ["bisect-passes", model, "--check-spec", "gelu.yaml", "--min-bad", "min_bad.onnx", "--bundle", "bug.zip"]
    assert run(bisect) == 0
    with zipfile.ZipFile("bug.zip") as archive:
        archive.extractall("bug")
    repro = subprocess.run(
        [sys.executable, "repro.py"], cwd="bug", capture_output=True, text=True, timeout=300, check=False
    )
    assert repro.returncode == 1, repro.stdout + repro.stderr  # REPRODUCED
    assert "in the graph onnxruntime optimized" in repro.stdout
    assert f'disabled_optimizers=["{GELU_FUSION}"]' in repro.stdout
    assert json.loads(Path("bug/passes.json").read_text())["optimizers"] == [GELU_FUSION]

"""Spec checks on models whose weights the workspace moves out of the model (>= 1 KB): every
iteration model references them through a hardlink, which ``onnx.load`` (1.19+) refuses as a
"potential hardlink attack". These go through the command line so that the real workspace writes
the iteration models."""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from tests.checks.conftest import COMPARE_FP16, cli
from tests.checks.models import conv_reshape_error_model, matmul_overflow_model

GOLDEN_FP16 = """\
kind: golden
target: {runtime: onnxruntime, precision: fp16}
tolerance: {atol: 0.001, rtol: 0.001}
"""
ERROR_ORT = """\
kind: error
target: {runtime: onnxruntime}
"""


def _reduce(tmp_path: Path, model: onnx.ModelProto, spec: str, *extra: str) -> dict[str, object]:
    onnx.save(model, str(tmp_path / "model.onnx"))
    (tmp_path / "spec.yaml").write_text(spec)
    args = ["reduce", "model.onnx", "-o", "min.onnx", "--check-spec", "spec.yaml", "--summary-json", "s.json"]
    # --no-reduce-data: these tests count the checks of localisation (smaller inputs: tests/cli/test_cli_data.py)
    proc = cli(*args, "--no-progress", "--no-reduce-data", *extra, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Moved" in proc.stderr + proc.stdout  # the weights really went to a reference file
    summary: dict[str, object] = json.loads((tmp_path / "s.json").read_text())
    return summary


def test_compare_fp16_with_externalized_weights_localises_the_matmul(tmp_path: Path) -> None:
    summary = _reduce(tmp_path, matmul_overflow_model(), COMPARE_FP16)
    assert summary["original"]["signature"] == "mismatch:nonfinite"  # type: ignore[index]
    assert summary["localization"]["path"] == "layerwise"  # type: ignore[index]
    assert summary["min_bad_nodes"] == ["MatMul:matmul"]


def test_compare_fp16_with_externalized_weights_reduces_to_the_matmul(tmp_path: Path) -> None:
    summary = _reduce(tmp_path, matmul_overflow_model(), COMPARE_FP16, "--no-localize")
    assert summary["original"]["signature"] == "mismatch:nonfinite"  # type: ignore[index]
    assert summary["min_bad_nodes"] == ["MatMul:matmul"]


def test_golden_with_externalized_weights(tmp_path: Path) -> None:
    onnx.save(matmul_overflow_model(), str(tmp_path / "model.onnx"))
    proc = cli("golden", "model.onnx", "-o", "model.golden", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = _reduce(tmp_path, matmul_overflow_model(), GOLDEN_FP16, "--golden", "model.golden")
    assert summary["original"]["signature"] == "mismatch:nonfinite"  # type: ignore[index]
    assert summary["localization"]["path"] == "layerwise"  # type: ignore[index]
    assert summary["min_bad_nodes"] == ["MatMul:matmul"]


def test_error_kind_with_externalized_conv_weights(tmp_path: Path) -> None:
    summary = _reduce(tmp_path, conv_reshape_error_model(), ERROR_ORT)
    assert str(summary["original"]["signature"]).startswith("error:")  # type: ignore[index]
    assert summary["min_bad_nodes"] == ["Reshape:bad_reshape"]


def test_a_localised_run_accounts_for_every_check(tmp_path: Path) -> None:
    """The summary of a run settled by localisation records the original's and the node's checks
    (with their time) and counts the layerwise run; the original is logged once."""
    summary = _reduce(tmp_path, matmul_overflow_model(), COMPARE_FP16)
    iterations = summary["iterations"]
    assert isinstance(iterations, list)
    assert [r["phase"] for r in iterations] == ["original", "localize"]
    assert summary["checks_run"] == 3  # original, layerwise run, the node alone
    assert float(str(summary["check_time_s"])) > 0


def test_a_reduction_after_localisation_logs_the_original_once(tmp_path: Path) -> None:
    onnx.save(matmul_overflow_model(), str(tmp_path / "model.onnx"))
    (tmp_path / "spec.yaml").write_text(COMPARE_FP16)
    proc = cli("reduce", "model.onnx", "-o", "m.onnx", "--check-spec", "spec.yaml", "--no-localize", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sum("| original " in line for line in proc.stderr.splitlines()) == 1

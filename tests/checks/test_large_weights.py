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
    proc = cli(*args, "--no-progress", *extra, cwd=tmp_path)
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

"""TensorRT targets: only on GPU workers (skipped cleanly without tensorrt)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from checks.build import build_check
from checks.spec import parse_check_spec
from reducer_core.verdict import VerdictKind
from tests.checks.models import overflow_model

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_tensorrt_compare_flags_the_fp16_overflow_only_in_fp16(tmp_path: Path, precision: str) -> None:
    pytest.importorskip("tensorrt")
    onnx.save(overflow_model(), str(tmp_path / "model.onnx"))
    spec = parse_check_spec(
        f"kind: compare\ntarget: {{runtime: tensorrt, precision: {precision}}}\ntolerance: {{atol: 0.001, rtol: 0.001}}"
    )
    assert spec.needs_gpu
    verdict, output = build_check(spec).run(tmp_path / "model.onnx")
    expected = VerdictKind.FAIL if precision == "fp16" else VerdictKind.PASS
    assert verdict.kind is expected, output

"""Spec checks with several slots (``--jobs``): each slot's spec check (a child interpreter, and
the layerwise run of a localising compare) ends where one slot ends."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from tests.checks.conftest import COMPARE_FP16, cli
from tests.checks.models import matmul_overflow_model


def reduce_with(tmp_path: Path, name: str, *extra: str) -> dict[str, object]:
    args = ["reduce", "model.onnx", "-o", f"{name}.onnx", "--check-spec", "spec.yaml", "--summary-json", f"{name}.json"]
    proc = cli(*args, "--no-progress", *extra, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary: dict[str, object] = json.loads((tmp_path / f"{name}.json").read_text())
    return summary


@pytest.mark.parametrize("localize", [True, False])
def test_a_compare_spec_ends_alike_with_three_slots(tmp_path: Path, localize: bool) -> None:
    onnx.save(matmul_overflow_model(), str(tmp_path / "model.onnx"))
    (tmp_path / "spec.yaml").write_text(COMPARE_FP16)
    options = [] if localize else ["--no-localize"]
    one = reduce_with(tmp_path, "one", *options)
    three = reduce_with(tmp_path, "three", "--jobs", "3", "--devices", "0,1,2", *options)
    assert three["min_bad_nodes"] == one["min_bad_nodes"] == ["MatMul:matmul"]
    assert (tmp_path / "three.onnx").read_bytes() == (tmp_path / "one.onnx").read_bytes()
    assert three["localization"] == one["localization"]
    assert three["jobs"] == 3

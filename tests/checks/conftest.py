from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPARE_FP16 = """\
kind: compare
reference: {runtime: onnxruntime}
target: {runtime: onnxruntime, precision: fp16}
tolerance: {atol: 0.001, rtol: 0.001}
"""
OP_PRESENT_MUL = """\
kind: op-present
ops: [Mul]
"""


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "reducer_cli.main", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


@pytest.fixture
def save(tmp_path: Path):  # type: ignore[no-untyped-def]
    def _save(model: onnx.ModelProto, name: str = "model.onnx") -> Path:
        path = tmp_path / name
        onnx.save(model, str(path))
        return path

    return _save

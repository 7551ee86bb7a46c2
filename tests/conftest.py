"""Shared fixtures: tiny models built in code with onnx.helper (no files are committed)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The console script must be callable from checks run by the tests (the venv's bin on PATH).
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test inside a fresh temporary directory (iteration artifacts land there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path

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


COST = ("tests/service/", "tests/cli/", "tests/checks/")  # the slowest folders first


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs ``-n 4 --dist loadfile``: a file's tests run on one worker
    in file order, sharing its module fixtures) the slowest folders' files are handed out first, so
    no long file starts last."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {prefix: n for n, prefix in enumerate(COST)}
        items.sort(key=lambda item: next((rank[p] for p in COST if item.nodeid.startswith(p)), len(COST)))

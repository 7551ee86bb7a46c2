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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """For pytest-xdist (`make test` runs ``-n ... --dist loadgroup``): a module whose tests share
    a module-scoped fixture (a browser, a service, a built venv) is one group that runs on one
    worker in file order, so the fixture is set up once; under xdist those groups, the longest
    units, are handed out first."""
    shared: set[str] = set()
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is not None and any(
            d.scope in ("module", "package", "class") for defs in info.name2fixturedefs.values() for d in defs
        ):
            shared.add(item.module.__name__ if isinstance(item, pytest.Function) else item.nodeid)
    for item in items:
        if isinstance(item, pytest.Function) and item.module.__name__ in shared:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: not (isinstance(item, pytest.Function) and item.module.__name__ in shared))

"""The worker's check memory limit: ``CHECK_MEMORY_LIMIT_BYTES`` is the default for a spec without
``memory_limit`` and the most a spec may ask for (no database or broker needed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from checks.spec import parse_check_spec
from persistence.config import ServiceSettings
from reducer_core.verdict import MEMORY_LIMIT_SIGNATURE, VerdictKind
from worker.checking import job_check

pytestmark = pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="the memory limit needs /proc")

HOG = "x = bytearray(400 * 2**20); import time; time.sleep(5)"
LIMIT = 150 * 2**20


@pytest.mark.parametrize("asked", [None, "4GiB"])
def test_the_service_limit_applies_to_every_check(tmp_path: Path, asked: str | None) -> None:
    spec: dict[str, object] = {"kind": "command", "command": [sys.executable, "-c", HOG], "timeout": 30}
    if asked is not None:
        spec["memory_limit"] = asked  # more than the service allows: lowered to its limit
    check = job_check(parse_check_spec(json.dumps(spec)), tmp_path, allow_command=True, memory_limit_bytes=LIMIT)
    verdict, _ = check.run(tmp_path / "m.onnx")
    assert (verdict.kind, verdict.signature) == (VerdictKind.CRASH, MEMORY_LIMIT_SIGNATURE)
    assert verdict.detail.endswith("> limit 150 MiB")


def test_the_setting_defaults_to_8_gib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHECK_MEMORY_LIMIT_BYTES", raising=False)
    assert ServiceSettings().check_memory_limit_bytes == 8 * 2**30
    monkeypatch.setenv("CHECK_MEMORY_LIMIT_BYTES", "0")
    assert ServiceSettings().check_memory_limit_bytes == 0

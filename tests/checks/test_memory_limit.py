"""The memory limit of check processes (``checks.memory``): the resident memory of a check and of
every process it started is summed while it runs; above the limit they are all killed and the
verdict is ``crash`` / ``memory-limit``. Spec field ``memory_limit`` and ``--check-memory-limit``."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx
import pytest

from checks.command import CommandCheck
from checks.isolated import IsolatedSpecCheck, run_isolated
from checks.memory import format_size, parse_size
from checks.spec import CheckSpecError, parse_check_spec
from reducer_core.verdict import MEMORY_LIMIT_SIGNATURE, Verdict, VerdictKind
from tests.checks.processes import wait_gone
from tests.cli.helpers import node, node_names, reduce, save_branchy, write_script
from tests.models import branchy_model

pytestmark = pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="the memory limit needs /proc")

MiB = 2**20
LIMIT = 150 * MiB
HOG = "x = bytearray(400 * 2**20); import time; time.sleep(60)"  # killed long before it ends


def hog(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A check child entry (``checks.child``) that allocates ``megabytes`` and holds them."""
    held = bytearray(int(payload["megabytes"]) * MiB)
    time.sleep(5)
    return {"kind": "pass", "signature": "", "detail": str(len(held)), "output": ""}


def _assert_memory_limit(verdict: Verdict) -> None:
    assert verdict.kind is VerdictKind.CRASH, verdict
    assert verdict.signature == MEMORY_LIMIT_SIGNATURE
    assert verdict.detail.startswith("used ") and verdict.detail.endswith("> limit 150 MiB"), verdict.detail
    assert verdict.duration_s < 3, "killed within a couple of seconds, not after the check's own 5 s"


def test_a_check_over_the_limit_is_killed_with_its_process_group() -> None:
    check = CommandCheck(
        ["sh", "-c", f'echo $$; exec "{sys.executable}" -c "{HOG}"'], timeout_s=30, memory_limit_bytes=LIMIT
    )
    verdict, output = check.run()
    _assert_memory_limit(verdict)
    group = int(output.split()[0])
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)


def test_a_grandchild_in_a_session_of_its_own_is_counted_and_killed() -> None:
    # The check's child starts the allocating grandchild in a new session (as a runtime's
    # helper process might); it is neither the check's process nor in its process group.
    spawn = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {HOG!r}], start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "p.wait()\n"
    )
    check = CommandCheck([sys.executable, "-c", spawn], timeout_s=30, memory_limit_bytes=LIMIT)
    verdict, output = check.run()
    _assert_memory_limit(verdict)
    assert wait_gone([int(output.split()[0])], within_s=10.0)


def test_a_check_under_the_limit_runs_normally() -> None:
    code = "x = bytearray(20 * 2**20); import time; time.sleep(0.5); print('ok')"
    verdict, output = CommandCheck([sys.executable, "-c", code], memory_limit_bytes=LIMIT).run()
    assert verdict.kind is VerdictKind.PASS
    assert output.strip() == "ok"
    failing = CommandCheck([sys.executable, "-c", "raise SystemExit(3)"], memory_limit_bytes=LIMIT).run()[0]
    assert (failing.kind, failing.signature) == (VerdictKind.FAIL, "exit=3")


def test_isolated_spec_checks_have_the_limit_too(tmp_path: Path) -> None:
    verdict, _ = run_isolated({"entry": f"{__name__}:hog", "megabytes": 400}, 30, LIMIT)
    _assert_memory_limit(verdict)
    spec = parse_check_spec("kind: op-present\nops: [Mul]\nmemory_limit: 1GiB")
    assert spec.memory_limit == 2**30
    model = tmp_path / "model.onnx"
    onnx.save(branchy_model(), str(model))
    verdict, _ = IsolatedSpecCheck(spec).run(model)
    assert (verdict.kind, verdict.signature) == (VerdictKind.FAIL, "op-present:Mul")


@pytest.mark.parametrize(
    ("text", "size"),
    [("2GiB", 2 * 2**30), ("512MB", 512 * 10**6), ("1.5g", int(1.5 * 2**30)), ("150 MiB", LIMIT), ("1048576", MiB)],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size
    spec = parse_check_spec(f"kind: op-present\nops: [Mul]\nmemory_limit: {text}")
    assert spec.memory_limit == size
    assert parse_check_spec(json.dumps(spec.to_json())) == spec


def test_no_memory_limit_keeps_the_identity() -> None:
    spec = parse_check_spec("kind: op-present\nops: [Mul]")
    assert spec.memory_limit is None
    assert "memory_limit" not in spec.identity


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "must be a number of bytes or a size such as 512MiB"),
        ("12XB", "must be a number of bytes or a size"),
        ("true", "must be a number of bytes or a size"),
        ("[1]", "must be a number of bytes or a size"),
        ("0", "must be at least 1 MiB"),
        ("-5", "must be at least 1 MiB"),
        ("512", "must be at least 1 MiB"),
    ],
)
def test_bad_sizes_name_the_field(value: str, message: str) -> None:
    with pytest.raises(CheckSpecError, match=r"^memory_limit: ") as caught:
        parse_check_spec(f"kind: op-present\nops: [Mul]\nmemory_limit: {value}")
    assert message in str(caught.value)


def test_format_size() -> None:
    assert format_size(int(2.1 * 2**30)) == "2.1 GiB"
    assert format_size(LIMIT) == "150 MiB"


def test_a_memory_limit_kill_is_never_the_original_failure() -> None:
    killed = Verdict(VerdictKind.CRASH, MEMORY_LIMIT_SIGNATURE)
    original = Verdict(VerdictKind.FAIL, "exit=1")
    assert not killed.reproduces(original)
    assert not killed.reproduces(original, pinned=False)
    assert not killed.reproduces(Verdict(VerdictKind.CRASH, "signal=SIGSEGV"), pinned=False)
    assert killed.reproduces(Verdict(VerdictKind.CRASH, MEMORY_LIMIT_SIGNATURE), pinned=False)


@pytest.mark.parametrize("pinned", [True, False])
def test_reduce_with_a_memory_limit(in_tmp: Path, pinned: bool) -> None:
    """The original fails (H present) within the limit; candidates with E but without A blow the
    limit: they count as not reproducing, and the reduction still ends at H alone."""
    hog_when = f'grep -q "{node("E")}" "$1" && ! grep -q "{node("A")}" "$1" && exec "{sys.executable}" -c "{HOG}"'
    check = write_script("check.sh", f'{hog_when}\ngrep -q "{node("H")}" "$1" && exit 1\nexit 0')
    options = ["--check-memory-limit", "150MiB", "--check-timeout", "30", "--summary-json", "summary.json"]
    if not pinned:
        options.append("--any-failure")
    assert reduce(save_branchy(), "-o", "r.onnx", *options, check=check) == 0
    assert node_names("r.onnx") == [node("H")]
    data = json.loads(Path("summary.json").read_text())
    assert data["original"]["kind"] == "fail"
    killed = [it for it in data["iterations"] if it["verdict"] == "crash"]
    assert killed, "some candidate blew the limit"
    assert all(not it["reproduces"] for it in killed)


def test_the_option_rejects_bad_sizes(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        reduce(save_branchy(), "-o", "r.onnx", "--check-memory-limit", "lots", check=["true"])
    assert caught.value.code == 2
    assert "--check-memory-limit: must be a number of bytes or a size" in capsys.readouterr().err

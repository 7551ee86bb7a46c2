"""Workers lower their CPU priority (``WORKER_NICE``, default 10) so that an api, a database or a
browser on the same machine keeps answering while checks run; what a worker starts (its checks)
inherits it. Run in a child process: a priority once lowered cannot be raised again."""

from __future__ import annotations

import subprocess
import sys

from worker.settings import WorkerSettings

PROBE = (
    "import os, subprocess, sys\n"
    "from worker.process import lower_priority\n"
    "os.nice({start})\n"
    "now = lower_priority({asked})\n"
    "child = subprocess.run([sys.executable, '-c', 'import os; print(os.nice(0))'], capture_output=True, text=True)\n"
    "print(now, child.stdout.strip())\n"
)


def _probe(start: int, asked: int) -> list[int]:
    command = [sys.executable, "-c", PROBE.format(start=start, asked=asked)]
    out = subprocess.run(command, check=False, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [int(v) for v in out.stdout.split()]


def test_a_worker_lowers_its_priority_and_its_checks_inherit_it() -> None:
    assert WorkerSettings().worker_nice == 10
    assert _probe(start=0, asked=10) == [10, 10]


def test_a_priority_already_lower_is_kept() -> None:
    assert _probe(start=15, asked=10) == [15, 15]
    assert _probe(start=0, asked=0) == [0, 0]

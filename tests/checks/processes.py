"""Whether a check's process (or one it started) still runs, read from ``/proc``."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path


def process_state(pid: int) -> str | None:
    """The state letter ``/proc/<pid>/stat`` shows (``R``, ``S``, ``Z`` ...); None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for a parent that does not reap is dead)."""
    return process_state(pid) not in (None, "Z", "X")


def thread_count(pid: int) -> int:
    """How many threads ``pid`` has left (0 once it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def wait_gone(pids: Iterable[int], within_s: float) -> bool:
    """Whether every one of ``pids`` stops running within ``within_s`` seconds."""
    pids = list(pids)
    deadline = time.monotonic() + within_s
    while any(running(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True

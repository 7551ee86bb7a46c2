"""A memory limit for a check's processes without ``RLIMIT_AS`` (which breaks CUDA: a CUDA
process reserves far more address space than it ever touches).

A watchdog sums the resident memory (RSS, ``/proc/<pid>/statm``) of every process of the check:
the process it started, every descendant (also one that started a session of its own) and every
process still in the check's process group (also an orphan whose parent exited). ``pump`` samples
it every ``POLL_S`` while it waits on the check's output; above the limit, all of those processes
are killed (their process groups too) and the verdict is ``crash`` with signature
``memory-limit``. The first sample comes one ``POLL_S`` after the start (a sample reads every
process's ``/proc/<pid>/stat``, a few milliseconds of CPU: a check shorter than that is not
sampled). Linux only: where ``/proc`` is missing, there is no limit.

It is a sampled limit, not a hard cap: a check that allocates faster than the limit in one
``POLL_S`` can exceed it briefly. RSS counts pages shared between processes (libraries, fork
copy-on-write pages) once per process, so the sum errs on the high side. Device (GPU) memory is
not resident memory and is not counted."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

from reducer_core.verdict import MEMORY_LIMIT_SIGNATURE

__all__ = ["MEMORY_LIMIT_SIGNATURE", "POLL_S", "MemoryWatch", "format_size", "kill_check_processes", "parse_size"]

POLL_S = 0.2
MIN_LIMIT_BYTES = 2**20
_PROC = Path("/proc")
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
SIZE_HELP = "a number of bytes or a size such as 512MiB, 2GiB or 4GB"


def parse_size(value: object, minimum: int = MIN_LIMIT_BYTES) -> int:
    """Bytes from ``2GiB``, ``512MB``, ``1.5G`` or a number of bytes; at least ``minimum`` (1 MiB
    for memory limits). KB, MB, GB, TB are powers of 1000; KiB, MiB, GiB, TiB and K, M, G, T
    powers of 1024 (units ignore case). Raises ``ValueError`` saying what is accepted."""
    if isinstance(value, bool):
        raise ValueError(f"must be {SIZE_HELP}, got {value!r}")
    if isinstance(value, int | float):
        size = float(value)
    elif isinstance(value, str) and (match := _SIZE.fullmatch(value)) and match[2].lower() in _UNITS:
        size = float(match[1]) * _UNITS[match[2].lower()]
    else:
        raise ValueError(f"must be {SIZE_HELP}, got {value!r}")
    if not size >= minimum or size == float("inf"):
        least = "1 MiB" if minimum == MIN_LIMIT_BYTES else f"{minimum} bytes"
        raise ValueError(f"must be at least {least}, got {value!r}")
    return int(size)


def format_size(size: int) -> str:
    """``2.1 GiB``, ``412 MiB``: enough digits to tell a use from its limit."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            value = size / scale
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{size} B"


def supported() -> bool:
    return (_PROC / "self" / "statm").exists()


def _table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) for every process, from ``/proc/<pid>/stat``."""
    table: dict[int, tuple[int, int]] = {}
    with contextlib.suppress(OSError), os.scandir(_PROC) as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"{_PROC}/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                table[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return table


def check_processes(root: int) -> set[int]:
    """``root``, its descendants, and the other members of its process group (``root`` leads it)."""
    table = _table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found = {root} | {pid for pid, (_, group) in table.items() if group == root}
    frontier = list(found)
    while frontier:
        for child in children.get(frontier.pop(), ()):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def kill_processes(root: int, pids: set[int]) -> None:
    """SIGKILL ``pids``, their process groups and ``root``'s group (never this process's)."""
    groups = {root}
    for pid in pids:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(pid))
    groups.discard(os.getpgrp())
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for pid in pids - {os.getpid()}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def kill_check_processes(root: int) -> None:
    """Kill a check started as ``root`` (a group leader) and every process it started."""
    kill_processes(root, check_processes(root) if supported() else {root})


def _rss(pid: int) -> int:
    try:
        with open(f"{_PROC}/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0  # gone already


class MemoryWatch:
    """Samples the check's resident memory (at most every ``POLL_S``) against ``limit``."""

    def __init__(self, root: int, limit: int, poll_s: float = POLL_S) -> None:
        self.root, self.limit, self.poll_s = root, limit, poll_s
        self.used = 0
        self.peak = 0
        self.pids: set[int] = set()
        self._due = time.monotonic() + poll_s  # at the start the check has allocated nothing yet

    @classmethod
    def create(cls, root: int, limit: int | None) -> MemoryWatch | None:
        """None without a limit, or where ``/proc`` is missing (no limit there)."""
        return cls(root, limit) if limit is not None and supported() else None

    def due_in(self) -> float:
        return max(0.0, self._due - time.monotonic())

    def over_limit(self) -> bool:
        """Sample when due; True when the check's processes use more than the limit."""
        if time.monotonic() < self._due:
            return False
        self._due = time.monotonic() + self.poll_s
        self.pids = check_processes(self.root)
        self.used = sum(_rss(pid) for pid in self.pids)
        self.peak = max(self.peak, self.used)
        return self.used > self.limit

    def kill(self) -> None:
        """SIGKILL every process sampled last and their process groups (never this process's)."""
        kill_processes(self.root, self.pids)

    @property
    def detail(self) -> str:
        return f"used {format_size(self.used)} > limit {format_size(self.limit)}"

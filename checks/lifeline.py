"""A check dies with the process that started it.

A service worker killed with SIGKILL cannot stop its check, and a check runs in a session of its
own (so that its whole process group can be killed on timeout): without more, it would go on
running next to the re-run of the same check on the restarted worker, two checks of one job on
one GPU. Two mechanisms:

* Linux's ``PR_SET_PDEATHSIG``: the child gets SIGKILL when the thread that started it ends. It
  holds across ``exec`` but not across ``fork``, so every level that starts a check process sets
  it: our own Python children call ``die_with_parent_now()`` first thing (nothing for the parent
  to do, so starting them stays a cheap ``vfork``); a check command gets it from
  ``die_with_parent()`` as ``preexec_fn`` (which makes ``subprocess`` fork instead, a cost that
  grows with the parent's memory: a few ms in a check runner). The thread that starts a check
  must wait for it (they all do).
* The owner mark: a worker writes ``ONNX_REDUCER_CHECK_OWNER=<pid>:<start time>`` into its own
  environment (``mark_owner``); every process below it inherits the mark (the allow-listed check
  environment keeps it), also what a check command starts itself, in any session. Worker start-up
  and every worker heartbeat call ``kill_orphaned_checks``, which kills each process of this user
  carrying the mark of a process that no longer runs.

Elsewhere than Linux both are no-ops.

The api's intake workers (``multiprocessing`` spawn children) call ``exit_with_parent_process``:
they leave with the api, and so does multiprocessing's resource tracker (it exits once every
process holding its pipe is gone)."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

OWNER_ENV = "ONNX_REDUCER_CHECK_OWNER"
_PR_SET_PDEATHSIG = 1
_PROC = Path("/proc")


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # this process's own symbols, libc's among them
    except OSError:
        return None
    prctl: Callable[..., int] = libc.prctl
    return prctl


_prctl = _load_prctl()  # resolved here, so the forked child only makes the call


def die_with_parent_now() -> None:
    """Called first thing in a check's own Python child: SIGKILL when its parent ends. (A parent
    killed before this call leaves the child to ``kill_orphaned_checks``.)"""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets SIGKILL when its parent (the
    calling thread) ends. None where the platform has no such thing, and outside a service worker
    (no owner mark): on the command line the parent may hold a large model, where a ``preexec_fn``
    (a real fork instead of vfork) costs ~150 ms per check, and a thread pool running checks in
    parallel would kill a check whenever the thread that started it is retired."""
    prctl = _prctl
    if prctl is None or OWNER_ENV not in os.environ:
        return None
    parent = os.getpid()

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the call above
            os._exit(1)

    return in_child


def exit_with_parent_process() -> None:
    """For a ``multiprocessing`` child (the api's intake workers): end this process as soon as the
    process that started it is gone, also after a SIGKILL. A daemon thread waits on the parent's
    sentinel (a pipe multiprocessing keeps open in the parent until it exits), so the lifeline holds
    whichever of the parent's threads started the child; ``PR_SET_PDEATHSIG`` would follow that
    thread, which a thread pool may retire. No-op outside a multiprocessing child."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def owner_mark(pid: int) -> str | None:
    """``pid:start-time``: names one process even after its pid is reused."""
    started = _start_time(pid)
    return f"{pid}:{started}" if started is not None else None


def mark_owner() -> None:
    """Mark every process this one starts from now on (see the module doc)."""
    mark = owner_mark(os.getpid())
    if mark is not None:
        os.environ[OWNER_ENV] = mark


def kill_orphaned_checks() -> int:
    """SIGKILL every process of this user whose owner mark names a process that is gone; returns
    how many were killed."""
    killed = 0
    alive: dict[str, bool] = {}
    for pid, mark in _marked_processes():
        if mark not in alive:
            alive[mark] = _owner_alive(mark)
        if not alive[mark]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def _marked_processes() -> Iterator[tuple[int, str]]:
    if not _PROC.is_dir():
        return
    needle = OWNER_ENV.encode() + b"="
    own = os.getpid()
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item.startswith(needle):
                yield int(entry.name), item[len(needle) :].decode(errors="replace")
                break


def _owner_alive(mark: str) -> bool:
    pid_text, _, started = mark.partition(":")
    if not pid_text.isdigit():
        return True  # not a mark of ours: leave the process alone
    return _start_time(int(pid_text)) == started


def _start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat`` (clock ticks after boot), or None when the process is gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None

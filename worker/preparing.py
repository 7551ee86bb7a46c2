"""The jobs this process is preparing right now, and how a cancel or a delete stops one.

Loading a big model takes many seconds (450k nodes: about a minute) inside ``onnx``, the pure
core and ``engine.workspace``, none of which looks at a cancel flag. A watching thread
(``worker.cancel_watch``) finds the job cancelled, ended or deleted and calls ``stop``: the
preparing thread gets ``PreparationStopped`` raised in it at its next Python instruction (a
call into C, such as ONNX's shape inference, finishes first: a second or two at 450k nodes).
``PreparationStopped`` is a ``BaseException``, so no ``except Exception`` on the way swallows it,
and the ``except BaseException`` cleanups of the preparation (scratch folders, the inline-weights
file, a fallback inference's child process) run as it unwinds.

The exception is only ever raised inside ``Preparing.of``: a stop that comes as the preparation
ends is raised there (or cleared and raised by hand), never later in other work."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


class PreparationStopped(BaseException):
    """The job being prepared was cancelled, ended or deleted meanwhile: its preparation stops."""


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in the thread ``thread_id`` at its next Python instruction (None: clear it)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


@dataclass(eq=False)
class _Region:
    """One thread's preparation of one job."""

    job_id: str
    thread_id: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False
    stopped: bool = False


class Preparing:
    """The jobs this process is preparing (``of``), which a watcher may ``stop``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._regions: list[_Region] = []

    @contextmanager
    def of(self, job_id: str) -> Iterator[None]:
        region = _Region(job_id, threading.get_ident())
        with self._lock:
            self._regions.append(region)
        try:
            yield
        finally:
            self._leave(region)

    def _leave(self, region: _Region) -> None:
        try:
            with region.lock:
                region.done = True  # no stop is raised from now on
                stopped = region.stopped
            if stopped:  # a stop raised as the preparation ended: not left pending for later work
                _raise_in(region.thread_id, None)
                raise PreparationStopped()
        finally:
            with self._lock:
                self._regions.remove(region)

    def jobs(self) -> list[str]:
        with self._lock:
            return list(dict.fromkeys(region.job_id for region in self._regions))

    def stop(self, job_id: str) -> int:
        """Stop every preparation of ``job_id`` in this process; how many were stopped."""
        with self._lock:
            regions = [region for region in self._regions if region.job_id == job_id]
        stopped = 0
        for region in regions:
            if not region.lock.acquire(timeout=1.0):
                continue  # the preparation is leaving right now
            try:
                if not region.done and not region.stopped:
                    region.stopped = True
                    _raise_in(region.thread_id, PreparationStopped)
                    stopped += 1
            finally:
                region.lock.release()
        return stopped

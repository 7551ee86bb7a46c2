"""One scheduler per worker process for its periodic duties (presence, cancel watch, poll), as
Celery's worker keeps one timer for its own: a heap of due times read by one thread, which hands
each due duty to a few runner threads, so a slow duty (a poll that found work and runs it, a
heartbeat that sweeps blobs) delays none of the others.

A duty runs once at a time: its next run is planned when its run ends, after the delay it returns
(None: its interval). ``wake`` runs it now (or, while it runs, once more as soon as it ends). A
duty that raises is logged and runs again after its interval. Every thread is a daemon: a worker
that exits leaves no duty to wait for."""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("onnx_reducer.worker")
RUNNERS = 3  # duties run at once (one slow leaves the others on time)


@dataclass(eq=False)
class Duty:
    """One periodic duty: ``run`` returns the delay to its next run (None: ``interval_s``)."""

    name: str
    interval_s: float
    run: Callable[[], float | None]
    due: float = 0.0
    running: bool = False
    woken: bool = False


class Scheduler:
    """The timer heap, its thread and its runner threads (module doc)."""

    def __init__(self, name: str = "worker", runners: int = RUNNERS) -> None:
        self.name, self.runners = name, runners
        self._changed = threading.Condition()
        self._heap: list[tuple[float, int, Duty]] = []
        self._order = itertools.count()
        self._ready: queue.SimpleQueue[Duty | None] = queue.SimpleQueue()
        self._stopped = False
        self._threads: list[threading.Thread] = []

    def every(
        self, interval_s: float, run: Callable[[], float | None], name: str, first_s: float | None = None
    ) -> Duty:
        """Run ``run`` every ``interval_s`` (first after ``first_s``, by default ``interval_s``)."""
        duty = Duty(name, interval_s, run)
        with self._changed:
            self._plan(duty, interval_s if first_s is None else first_s)
        return duty

    def wake(self, duty: Duty) -> None:
        """Run ``duty`` now; while it runs, again as soon as it ends."""
        with self._changed:
            if duty.running:
                duty.woken = True
            else:
                self._plan(duty, 0.0)

    def start(self) -> Scheduler:
        timer = threading.Thread(target=self._dispatch, name=f"{self.name}-timer", daemon=True)
        runners = [
            threading.Thread(target=self._run_ready, name=f"{self.name}-duty-{i + 1}", daemon=True)
            for i in range(self.runners)
        ]
        self._threads = [timer, *runners]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """No duty starts after this returns; the duties running now are waited for up to
        ``timeout`` (a poll running a job goes on alone)."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        for _ in range(self.runners):
            self._ready.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0.0))

    def _plan(self, duty: Duty, delay_s: float) -> None:
        """(Under the lock.) ``duty`` is due in ``delay_s``; an earlier plan of it no longer counts."""
        duty.due = time.monotonic() + delay_s
        heapq.heappush(self._heap, (duty.due, next(self._order), duty))
        self._changed.notify_all()

    def _dispatch(self) -> None:
        while (duty := self._next_due()) is not None:
            self._ready.put(duty)

    def _next_due(self) -> Duty | None:
        """The next duty due, once it is (None: stopped)."""
        with self._changed:
            while not self._stopped:
                if not self._heap:
                    self._changed.wait()
                    continue
                due, _, duty = self._heap[0]
                wait_s = due - time.monotonic()
                if wait_s > 0:
                    self._changed.wait(wait_s)
                    continue
                heapq.heappop(self._heap)
                if due != duty.due or duty.running:
                    continue  # planned again since (woken), or running: its end plans it
                duty.running = True
                return duty
            return None

    def _run_ready(self) -> None:
        while (duty := self._ready.get()) is not None:
            delay = None
            try:
                delay = duty.run()
            except Exception:
                log.exception("%s: the periodic duty %s failed; it runs again later", self.name, duty.name)
            with self._changed:
                duty.running = False
                if not self._stopped:
                    self._plan(duty, 0.0 if duty.woken else duty.interval_s if delay is None else delay)
                duty.woken = False

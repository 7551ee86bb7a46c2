"""Reads that requests share.

``SingleFlight``: at most one read per key at a time; whoever asks for a key while its read runs
awaits that read (``api.job_cache`` builds on it, and so does ``SharedReads``).

``SharedReads``: the event streams of one job poll the database for the same rows (a page with 10
viewers, a CI client and a browser on one job). A read's result is reused for ``fresh_s`` seconds;
so 10 streams on a job cost one query per poll, not 10. Only for polling: a reader woken by a
notification must read after it, so ``fresh_s`` 0 turns sharing off. Event loop only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")


class SingleFlight(Generic[Key, Value]):
    def __init__(self) -> None:
        self._reading: dict[Key, asyncio.Future[Value]] = {}

    def join(self, key: Key, read: Callable[[], Awaitable[Value]]) -> asyncio.Future[Value]:
        """The read of ``key`` that runs now, else ``read()`` started in the background. Await it
        through ``asyncio.shield``: a request that gives up does not cancel it for the others."""
        pending = self._reading.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._run(key, read))
            pending.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved
            self._reading[key] = pending
        return pending

    async def _run(self, key: Key, read: Callable[[], Awaitable[Value]]) -> Value:
        try:
            return await read()
        finally:
            del self._reading[key]


class SharedReads(Generic[Key, Value]):
    def __init__(self, fresh_s: float, max_entries: int = 256) -> None:
        self.fresh_s, self.max_entries = fresh_s, max_entries
        self._recent: dict[Key, tuple[float, Value]] = {}
        self._flights: SingleFlight[Key, Value] = SingleFlight()

    async def read(self, key: Key, read: Callable[[], Awaitable[Value]]) -> Value:
        if self.fresh_s <= 0:
            return await read()
        recent = self._recent.get(key)
        if recent is not None and time.monotonic() - recent[0] < self.fresh_s:
            return recent[1]
        return await asyncio.shield(self._flights.join(key, lambda: self._read(key, read)))

    async def _read(self, key: Key, read: Callable[[], Awaitable[Value]]) -> Value:
        started = time.monotonic()
        value = await read()
        self._forget_old(started)
        self._recent[key] = (started, value)
        return value

    def _forget_old(self, now: float) -> None:
        if len(self._recent) >= self.max_entries:
            self._recent = {k: v for k, v in self._recent.items() if now - v[0] < self.fresh_s}
            while len(self._recent) >= self.max_entries:
                self._recent.pop(next(iter(self._recent)))

"""Reads that requests share: the event streams of one job poll the database for the same rows
(a page with 10 viewers, a CI client and a browser on one job). A read started for a key is
awaited by every request asking for that key meanwhile, and its result is reused for ``fresh_s``
seconds; so 10 streams on a job cost one query per poll, not 10. Only for polling: a reader woken
by a notification must read after it, so ``fresh_s`` 0 turns sharing off. Event loop only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")


class SharedReads(Generic[Key, Value]):
    def __init__(self, fresh_s: float, max_entries: int = 256) -> None:
        self.fresh_s, self.max_entries = fresh_s, max_entries
        self._recent: dict[Key, tuple[float, Value]] = {}
        self._reading: dict[Key, asyncio.Future[Value]] = {}

    async def read(self, key: Key, read: Callable[[], Awaitable[Value]]) -> Value:
        if self.fresh_s <= 0:
            return await read()
        recent = self._recent.get(key)
        if recent is not None and time.monotonic() - recent[0] < self.fresh_s:
            return recent[1]
        pending = self._reading.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._read(key, read))
            pending.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved
            self._reading[key] = pending
        return await asyncio.shield(pending)

    async def _read(self, key: Key, read: Callable[[], Awaitable[Value]]) -> Value:
        started = time.monotonic()
        try:
            value = await read()
        finally:
            del self._reading[key]
        self._forget_old(started)
        self._recent[key] = (started, value)
        return value

    def _forget_old(self, now: float) -> None:
        if len(self._recent) >= self.max_entries:
            self._recent = {k: v for k, v in self._recent.items() if now - v[0] < self.fresh_s}
            while len(self._recent) >= self.max_entries:
                self._recent.pop(next(iter(self._recent)))

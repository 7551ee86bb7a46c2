"""Recent bodies of ``GET /v1/jobs/{id}``, the pollers' hot path: a job read at 200 requests per
second is built from the database a few times per second, not 200 times (the queries and the
serialisation cost several ms of the api's CPU each, and a read waits for the database while
workers write to it).

A body is never served older than ``ttl_s`` seconds. A request finding one older than half that
starts one read in the background and is answered from the copy, so a job polled often is kept
fresh without any request waiting for the database; a request finding none (or an expired one)
waits for a read, shared with every request that comes meanwhile. What this api sees change a
job's status forgets its copy at once: its own writes (cancel, retry, a verdict: ``forget``) and
the status events its event streams send (``saw_change``), so a client that made a change, or saw
the status change in its stream, and then reads the job sees it there. (Progress, the iterations
and checks in flight, is at most ``ttl_s`` old: forgetting the copy on every iteration would make
every poller wait for the database several times a second.) Entries are per team and job: a team
never gets another team's body."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from api.shared_reads import SingleFlight

Read = Callable[[], Awaitable[bytes]]


@dataclass
class _Entry:
    read_at: float  # time.monotonic() when the read that produced it started
    body: bytes


class JobReadCache:
    def __init__(self, ttl_s: float, max_entries: int = 10_000) -> None:
        self.ttl_s, self.max_entries = ttl_s, max_entries
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._forgotten: OrderedDict[str, float] = OrderedDict()  # job -> when this api last saw it change
        self._changes_seen: OrderedDict[str, int] = OrderedDict()  # job -> the last status event's seq
        self._lock = threading.Lock()  # forget() also runs in the threads of sync routes
        self._flights: SingleFlight[tuple[str, str], bytes] = SingleFlight()  # on the event loop only

    async def body(self, team_id: str, job_id: str, read: Read) -> bytes:
        """The job's body, at most ``ttl_s`` old; ``read()``'s errors (a 404) reach every request
        waiting for it."""
        if self.ttl_s <= 0:
            return await read()
        key = (team_id, job_id)
        with self._lock:
            entry = self._entries.get(key)
        age = time.monotonic() - entry.read_at if entry is not None else self.ttl_s
        if entry is not None and age < self.ttl_s:
            if age >= self.ttl_s / 2:
                self._flights.join(key, lambda: self._read(key, read))  # refreshed ahead: nobody waits
            return entry.body
        return await asyncio.shield(self._flights.join(key, lambda: self._read(key, read)))

    async def _read(self, key: tuple[str, str], read: Read) -> bytes:
        read_at = time.monotonic()
        try:
            body = await read()
        except BaseException:
            with self._lock:
                self._entries.pop(key, None)  # a job that is gone (404) is not answered from a copy
            raise
        self._put(key, body, read_at)
        return body

    def _put(self, key: tuple[str, str], body: bytes, read_at: float) -> None:
        with self._lock:
            if read_at < self._forgotten.get(key[1], float("-inf")):
                return  # read before this api saw the job change: the next request reads again
            self._entries[key] = _Entry(read_at, body)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def saw_change(self, team_id: str, job_id: str, seq: int) -> None:
        """An event stream sends the job's status event ``seq``: forgotten once per event, however
        many streams follow the job."""
        with self._lock:
            if self._changes_seen.get(job_id, 0) >= seq:
                return
            self._changes_seen[job_id] = seq
            self._changes_seen.move_to_end(job_id)
            while len(self._changes_seen) > self.max_entries:
                self._changes_seen.popitem(last=False)
        self.forget(team_id, job_id)

    def forget(self, team_id: str, job_id: str) -> None:
        """The job changed (this api changed it, or one of its event streams saw an event): no copy
        read before now is served again."""
        with self._lock:
            self._entries.pop((team_id, job_id), None)
            self._forgotten[job_id] = time.monotonic()
            self._forgotten.move_to_end(job_id)
            while len(self._forgotten) > self.max_entries:
                self._forgotten.popitem(last=False)

"""The api's shared reads (``api.job_cache``, ``api.shared_reads``): job bodies served for a short
time, the previous body while one read runs, concurrent reads of one job done once, the api's own
writes visible at once; event-stream polls of one job shared; and, through a real app and
database, what a poller sees."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from fastapi import FastAPI

from api.app import create_app
from api.job_cache import JobReadCache
from api.settings import ApiSettings
from api.shared_reads import SharedReads
from persistence.db import Database
from persistence.enums import EventKind, JobStatus
from persistence.models import Job
from persistence.repositories import EventRepository
from tests.service.conftest import client_for
from tests.service.helpers import chain_model, submit


class Reads:
    """A fake database read: counts calls, answers ``body`` after ``delay_s``."""

    def __init__(self, body: bytes = b"v1", delay_s: float = 0.0) -> None:
        self.body, self.delay_s, self.calls = body, delay_s, 0

    def __call__(self) -> Callable[[], Awaitable[bytes]]:
        async def read() -> bytes:
            self.calls += 1
            await asyncio.sleep(self.delay_s)
            return self.body

        return read


def test_a_fresh_body_is_served_without_a_read_and_teams_never_share() -> None:
    async def scenario() -> None:
        cache, reads = JobReadCache(ttl_s=5), Reads()
        assert await cache.body("team-a", "job", reads()) == b"v1"
        reads.body = b"v2"
        assert await cache.body("team-a", "job", reads()) == b"v1"
        assert reads.calls == 1
        assert await cache.body("team-b", "job", reads()) == b"v2"  # another team: its own read
        assert reads.calls == 2

    asyncio.run(scenario())


def test_concurrent_requests_for_one_job_share_one_read() -> None:
    async def scenario() -> None:
        cache, reads = JobReadCache(ttl_s=5), Reads(delay_s=0.1)
        bodies = await asyncio.gather(*(cache.body("t", "job", reads()) for _ in range(50)))
        assert bodies == [b"v1"] * 50 and reads.calls == 1

    asyncio.run(scenario())


def test_a_body_past_half_its_time_is_served_while_it_is_read_again_in_the_background() -> None:
    async def scenario() -> None:
        cache, reads = JobReadCache(ttl_s=2.0), Reads(delay_s=0.5)
        await cache.body("t", "job", reads())  # read at t0, answered at t0 + 0.5
        await asyncio.sleep(1.0)  # past half of ttl_s
        reads.body = b"v2"
        started = time.monotonic()
        bodies = [await cache.body("t", "job", reads()) for _ in range(20)]
        assert time.monotonic() - started < 0.3  # nobody waited for the 0.5 s read
        await asyncio.sleep(0.01)  # the read started in the background
        assert bodies == [b"v1"] * 20 and reads.calls == 2
        await asyncio.sleep(0.7)  # it ended: a copy read at t0 + 1.5, less than half ttl_s old
        assert await cache.body("t", "job", reads()) == b"v2"
        assert reads.calls == 2

    asyncio.run(scenario())


def test_a_body_past_its_time_is_never_served() -> None:
    async def scenario() -> None:
        cache, reads = JobReadCache(ttl_s=0.05), Reads()
        await cache.body("t", "job", reads())
        await asyncio.sleep(0.1)  # a poller that comes back rarely gets a new read
        reads.body = b"v2"
        assert await cache.body("t", "job", reads()) == b"v2"

    asyncio.run(scenario())


def test_forget_drops_the_body_and_any_read_started_before_it() -> None:
    async def scenario() -> None:
        cache, reads = JobReadCache(ttl_s=5), Reads(delay_s=0.1)
        first = asyncio.ensure_future(cache.body("t", "job", reads()))
        await asyncio.sleep(0.02)
        cache.forget("t", "job")  # the api cancelled the job while the read ran
        assert await first == b"v1"  # that request gets what it read ...
        reads.body = b"cancelled"
        assert await cache.body("t", "job", reads()) == b"cancelled"  # ... but it was not kept

    asyncio.run(scenario())


def test_a_status_event_forgets_the_copy_once_however_many_streams_send_it() -> None:
    async def scenario() -> None:
        cache, reads = JobReadCache(ttl_s=5), Reads()
        await cache.body("t", "job", reads())
        reads.body = b"running"
        cache.saw_change("t", "job", 3)
        assert await cache.body("t", "job", reads()) == b"running"
        reads.body = b"later"
        cache.saw_change("t", "job", 3)  # the same event, sent by another stream of the job
        cache.saw_change("t", "job", 2)
        assert await cache.body("t", "job", reads()) == b"running" and reads.calls == 2

    asyncio.run(scenario())


def test_only_status_events_change_what_a_job_read_must_show() -> None:
    assert EventKind.STARTED.changes_status and EventKind.SUCCEEDED.changes_status
    assert EventKind.VERDICT_NEEDED.changes_status
    assert not EventKind.ITERATION.changes_status and not EventKind.CHECK_STARTED.changes_status


def test_a_failed_read_reaches_every_waiter_and_keeps_nothing() -> None:
    async def scenario() -> None:
        cache, calls = JobReadCache(ttl_s=5), 0

        async def missing() -> bytes:
            nonlocal calls
            calls += 1
            await asyncio.sleep(0.05)
            raise LookupError("Job 'job' not found")

        results = await asyncio.gather(*(cache.body("t", "job", missing) for _ in range(5)), return_exceptions=True)
        assert all(isinstance(r, LookupError) for r in results) and calls == 1
        with pytest.raises(LookupError):
            await cache.body("t", "job", missing)
        assert calls == 2

    asyncio.run(scenario())


def test_ttl_zero_reads_every_time() -> None:
    async def scenario() -> None:
        cache, reads = JobReadCache(ttl_s=0), Reads()
        for _ in range(3):
            await cache.body("t", "job", reads())
        assert reads.calls == 3

    asyncio.run(scenario())


def test_event_polls_of_one_job_share_a_read_and_reuse_it_briefly() -> None:
    async def scenario() -> None:
        shared: SharedReads[tuple[str, int], bytes] = SharedReads(fresh_s=1.0)
        reads = Reads(delay_s=0.05)
        results = await asyncio.gather(*(shared.read(("job", 7), reads()) for _ in range(10)))
        assert results == [b"v1"] * 10 and reads.calls == 1
        await shared.read(("job", 7), reads())
        assert reads.calls == 1  # within fresh_s
        await shared.read(("job", 8), reads())
        assert reads.calls == 2  # another position in the stream
        await asyncio.sleep(1.1)
        await shared.read(("job", 7), reads())
        assert reads.calls == 3

        unshared: SharedReads[tuple[str, int], bytes] = SharedReads(fresh_s=0)  # streams woken by Redis
        await asyncio.gather(*(unshared.read(("job", 7), reads()) for _ in range(4)))
        assert reads.calls == 7

    asyncio.run(scenario())


def _api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str], cache_s: float) -> str:
    """An api whose job bodies live ``cache_s``; its jobs stay queued (no runner)."""
    settings = ApiSettings(
        database_url=db_url, redis_url=None, data_dir=data_dir, job_read_cache_s=cache_s, sse_poll_s=0.05
    )
    return serve_app(create_app(settings, enqueue=lambda job_id, queue: None))


@pytest.fixture
def polled_api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> str:
    return _api(db_url, data_dir, serve_app, cache_s=POLLED_CACHE_S)


POLLED_CACHE_S = 5.0  # long enough that a loaded machine reads the copy again within it (1 s was not)


def _set_status(db_url: str, job_id: str, status: JobStatus, event: EventKind | None = None) -> None:
    """As a worker would, in another process: the job's row and, optionally, an event."""
    db = Database(db_url)
    try:
        with db.session() as session:
            job = session.get(Job, job_id)
            assert job is not None
            job.status = status.value
            if event is not None:
                EventRepository(session).append(job_id, event, {"status": status.value})
    finally:
        db.dispose()


def test_a_client_that_saw_an_event_then_reads_the_job_sees_it_there(
    db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str], tokens: dict[str, str]
) -> None:
    api = _api(db_url, data_dir, serve_app, cache_s=5)
    with client_for(api, tokens["team-a"]) as client:
        job_id = submit(client, chain_model().SerializeToString()).json()["id"]
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"  # kept for 5 s
        _set_status(db_url, job_id, JobStatus.RUNNING, EventKind.STARTED)
        with client.stream("GET", f"/v1/jobs/{job_id}/events") as stream:
            next(line for line in stream.iter_lines() if line.startswith("event: job.started"))
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "running"


def test_a_poller_sees_a_worker_change_within_the_cache_time_and_its_own_cancel_at_once(
    polled_api: str, db_url: str, tokens: dict[str, str]
) -> None:
    with client_for(polled_api, tokens["team-a"]) as client:
        job_id = submit(client, chain_model().SerializeToString()).json()["id"]
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"
        _set_status(db_url, job_id, JobStatus.RUNNING)  # as a worker would, in another process
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"  # served from the copy
        deadline = time.monotonic() + POLLED_CACHE_S + 30
        while client.get(f"/v1/jobs/{job_id}").json()["status"] != "running":
            assert time.monotonic() < deadline, "the change never showed"
            time.sleep(0.05)
        queued = submit(client, chain_model().SerializeToString()).json()["id"]
        assert client.get(f"/v1/jobs/{queued}").json()["status"] == "queued"
        assert client.post(f"/v1/jobs/{queued}/cancel").status_code == 200
        assert client.get(f"/v1/jobs/{queued}").json()["status"] == "cancelled"  # its own write, at once
        with client_for(polled_api, tokens["team-b"]) as other:
            assert other.get(f"/v1/jobs/{job_id}").status_code == 404

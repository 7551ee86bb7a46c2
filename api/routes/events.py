"""``GET /v1/jobs/{id}/events``: server-sent events. Replays the event rows after ``Last-Event-ID``
(the per-job sequence number), then follows new rows, woken by Redis pub/sub (or polling the
database in embedded mode), with heartbeat comments, until the job ends or the stream's maximum
lifetime passes (the client reconnects with ``Last-Event-ID``; nothing is lost or repeated)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
import redis
import redis.asyncio as aioredis
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from api.deps import ServicesDep, TeamDep
from api.problems import ProblemError
from api.routes.jobs import load_job
from api.schemas import MAX_SEQ
from api.services import Services
from persistence.contracts import events_channel
from persistence.enums import EventKind
from persistence.models import Event
from persistence.repositories import EventRepository, JobRepository, TeamRepository

router = APIRouter(prefix="/v1/jobs", tags=["events"])
log = logging.getLogger("onnx_reducer.api")
REDIS_CONNECT_TIMEOUT_S = 5.0  # an unreachable Redis: the stream polls the database after this long


def format_event(event: Event) -> str:
    data = json.dumps({"seq": event.seq, "kind": event.kind, **event.payload}, separators=(",", ":"))
    return f"id: {event.seq}\nevent: {event.kind}\ndata: {data}\n\n"


class _Follower:
    """Reads new event rows in a thread; waits for a wake-up from Redis or a poll interval. Every
    ``sse_token_check_s`` it also checks that the client's token is still valid: a revoked token
    ends the stream. Redis only wakes it up (the event rows are the truth): while Redis cannot be
    reached, at the start or later, it polls the database as the embedded mode does, so a stream
    is never cut by a Redis outage."""

    def __init__(self, services: Services, job_id: str, token: str) -> None:
        self.services, self.job_id, self.token = services, job_id, token
        self.pubsub: Any = None
        self.client: Any = None
        self.token_checked = time.monotonic()

    async def open(self) -> None:
        url = self.services.settings.redis_url
        if not url:
            return
        self.client = aioredis.Redis.from_url(url, socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S)
        self.pubsub = self.client.pubsub()
        try:
            await self.pubsub.subscribe(events_channel(self.job_id))
        except (redis.RedisError, OSError) as exc:
            await self._without_redis(exc)

    async def _without_redis(self, exc: BaseException) -> None:
        """Redis failed: the stream goes on polling the database."""
        log.warning("events of job %s: Redis unreachable (%s); polling the database", self.job_id, exc)
        await self.close()

    async def close(self) -> None:
        pubsub, client = self.pubsub, self.client
        self.pubsub = self.client = None
        with contextlib.suppress(redis.RedisError, OSError):
            if pubsub is not None:
                await pubsub.aclose()
            if client is not None:
                await client.aclose()

    def _read(self, after: int) -> tuple[list[Event], bool]:
        with self.services.db.session() as session:
            events = list(EventRepository(session).after(self.job_id, after))
            job = JobRepository(session).get(self.job_id)
            ended = job is None or job.status.terminal
        return events, ended

    def _token_valid(self) -> bool:
        with self.services.db.session() as session:
            return TeamRepository(session).team_for_token(self.token) is not None

    async def revoked(self) -> bool:
        """Whether the token was revoked (checked at most every ``sse_token_check_s``)."""
        if time.monotonic() - self.token_checked < self.services.settings.sse_token_check_s:
            return False
        self.token_checked = time.monotonic()
        return not await anyio.to_thread.run_sync(self._token_valid)

    async def read(self, after: int) -> tuple[list[Event], bool]:
        """New events after ``after`` (one read shared by the streams of this job at that point)."""
        return await self.services.event_reads.read(
            (self.job_id, after), lambda: anyio.to_thread.run_sync(self._read, after)
        )

    async def wait(self, timeout: float) -> None:
        if self.pubsub is not None:
            try:
                await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=timeout)
                return
            except (redis.RedisError, OSError) as exc:
                await self._without_redis(exc)
        await anyio.sleep(min(timeout, self.services.settings.sse_poll_s))


async def _stream(
    services: Services, team_id: str, job_id: str, after: int, request: Request, token: str
) -> AsyncIterator[str]:
    settings = services.settings
    follower = _Follower(services, job_id, token)
    await follower.open()
    deadline = time.monotonic() + settings.sse_max_lifetime_s
    last_sent = time.monotonic()
    try:
        yield "retry: 2000\n\n"
        while time.monotonic() < deadline and not await request.is_disconnected():
            if await follower.revoked():
                yield ": token revoked\n\n"
                return
            events, ended = await follower.read(after)
            changes = [e.seq for e in events if EventKind(e.kind).changes_status]
            if changes:  # a client that saw the job's status change and then reads the job sees it there
                services.job_reads.saw_change(team_id, job_id, changes[-1])
            for event in events:
                yield format_event(event)
                after, last_sent = event.seq, time.monotonic()
                if EventKind(event.kind).terminal:
                    return
            if ended and not events:
                return
            if time.monotonic() - last_sent >= settings.sse_heartbeat_s:
                yield ": heartbeat\n\n"
                last_sent = time.monotonic()
            if not events:
                await follower.wait(min(settings.sse_heartbeat_s, max(deadline - time.monotonic(), 0.01)))
    finally:
        await follower.close()


def parse_last_event_id(value: str | None) -> int:
    """The event sequence number a client resumes after: ASCII digits within ``MAX_SEQ``; empty
    means from the start. Anything else is a 400 (never a 500)."""
    if not value:
        return 0
    value = value.strip()
    if not (value.isascii() and value.isdigit() and len(value) <= len(str(MAX_SEQ)) and int(value) <= MAX_SEQ):
        raise ProblemError(
            400,
            "Invalid Last-Event-ID",
            f"Last-Event-ID must be the id of an event this stream sent (a number from 0 to {MAX_SEQ}).",
        )
    return int(value)


@router.get("/{job_id}/events", response_class=StreamingResponse)
async def job_events(
    job_id: str,
    request: Request,
    services: ServicesDep,
    team: TeamDep,
    last_event_id: Annotated[str | None, Header()] = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_SEQ, description="resume after this event id")] = None,
) -> StreamingResponse:
    """Server-sent events of a job, resumable with ``Last-Event-ID``."""
    start = after if after is not None else parse_last_event_id(last_event_id)
    await anyio.to_thread.run_sync(load_job, services, team.id, job_id)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    token = request.headers.get("authorization", "").partition(" ")[2].strip()
    stream = _stream(services, team.id, job_id, start, request, token)
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

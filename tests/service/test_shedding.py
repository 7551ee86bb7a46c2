"""Load shedding and the token cache, on the ASGI level: beyond ``max_inflight`` short requests
the answer is an immediate 503 + Retry-After (event streams and uploads are not counted); a cached
token is looked up again once its time is up."""

from __future__ import annotations

import asyncio
import time

import httpx
from starlette.types import Receive, Scope, Send

from api.shedding import ShedMiddleware
from api.token_cache import TokenCache
from persistence.models import Team


def test_requests_beyond_the_limit_are_shed_with_retry_after() -> None:
    release = asyncio.Event()

    async def slow_app(scope: Scope, receive: Receive, send: Send) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def scenario() -> tuple[list[int], httpx.Response, int]:
        app = ShedMiddleware(slow_app, max_inflight=2, retry_after_s=1)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            held = [asyncio.create_task(client.get("/v1/jobs/a")) for _ in range(2)]
            stream = asyncio.create_task(client.get("/v1/jobs/a/events"))
            await asyncio.sleep(0.2)
            shed = await client.get("/v1/jobs/a")
            release.set()
            statuses = [r.status_code for r in await asyncio.gather(*held, stream)]
        return statuses, shed, app.inflight

    statuses, shed, inflight = asyncio.run(scenario())
    assert statuses == [200, 200, 200]  # the event stream was not counted
    assert shed.status_code == 503 and shed.headers["retry-after"] == "1"
    assert shed.headers["content-type"] == "application/problem+json"
    assert inflight == 0


def test_the_token_cache_forgets_after_its_ttl() -> None:
    cache = TokenCache(ttl_s=0.2)
    team = Team(id="t", name="team")
    cache.put("orx_secret", team)
    assert cache.get("orx_secret") is team
    assert "orx_secret" not in repr(cache._entries)
    time.sleep(0.3)
    assert cache.get("orx_secret") is None
    assert TokenCache(ttl_s=0).get("orx_secret") is None

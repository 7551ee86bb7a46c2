"""Load shedding: at most ``max_inflight`` short requests are handled at once; more answer 503
with ``Retry-After`` at once instead of queueing until every client times out. Event streams
(long-lived by design) and job uploads (``api.intake_pool`` bounds those) are not counted."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from api.problems import PROBLEM_JSON


class ShedMiddleware:
    def __init__(self, app: ASGIApp, max_inflight: int, retry_after_s: int) -> None:
        self.app, self.max_inflight, self.retry_after_s = app, max_inflight, retry_after_s
        self.inflight = 0
        self.shed = 0

    @staticmethod
    def _exempt(scope: Scope) -> bool:
        path: str = scope.get("path", "")
        return path.endswith("/events") or (scope.get("method") == "POST" and path.rstrip("/") == "/v1/jobs")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.max_inflight <= 0 or self._exempt(scope):
            await self.app(scope, receive, send)
            return
        if self.inflight >= self.max_inflight:
            self.shed += 1
            await self._refuse(scope, send)
            return
        self.inflight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.inflight -= 1

    async def _refuse(self, scope: Scope, send: Send) -> None:
        body = json.dumps(
            {
                "type": "about:blank",
                "title": "Busy",
                "status": 503,
                "detail": "This server is handling as many requests as it can; try again in a moment.",
                "instance": scope.get("path", ""),
            }
        ).encode()
        headers = [
            (b"content-type", PROBLEM_JSON.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(self.retry_after_s).encode()),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})

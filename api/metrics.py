"""Prometheus metrics of one app instance (its own registry, so several apps can coexist)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from persistence.db import Database
from persistence.repositories import JobRepository


class _JobsCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily("onnx_reducer_jobs", "Jobs by status", labels=["status"])
        try:
            with self.db.session() as session:
                counts = JobRepository(session).counts_by_status()
        except SQLAlchemyError:
            counts = {}
        for status, count in sorted(counts.items()):
            gauge.add_metric([status], count)
        yield gauge


def install_metrics(app: FastAPI, registry: CollectorRegistry, db: Database) -> None:
    requests = Counter("onnx_reducer_http_requests", "HTTP requests", ["method", "route", "status"], registry=registry)
    latency = Histogram("onnx_reducer_http_request_seconds", "Request latency", ["method", "route"], registry=registry)
    registry.register(_JobsCollector(db))
    app.add_middleware(_MeasureMiddleware, requests=requests, latency=latency)


class _MeasureMiddleware:
    """Counts requests and their latency by route template. A plain ASGI middleware: Starlette's
    ``BaseHTTPMiddleware`` costs a task group and memory streams per request, a large share of a
    small request's time."""

    def __init__(self, app: ASGIApp, requests: Counter, latency: Histogram) -> None:
        self.app, self.requests, self.latency = app, requests, latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.latency.labels(scope["method"], route).observe(time.perf_counter() - started)
            self.requests.labels(scope["method"], route, str(status)).inc()

"""Prometheus metrics of one app instance (its own registry, so several apps can coexist)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError

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

    @app.middleware("http")
    async def measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")
        latency.labels(request.method, route).observe(time.perf_counter() - started)
        requests.labels(request.method, route, str(response.status_code)).inc()
        return response

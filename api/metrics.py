"""Prometheus metrics of one app instance (its own registry, so several apps can coexist)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from api.farm import load_workers
from persistence.config import ServiceSettings
from persistence.db import Database
from persistence.models import utcnow
from persistence.repositories import IterationRepository, JobRepository

RATE_WINDOW_S = 60.0


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


class _FarmCollector(Collector):
    """Queue depth per team, checks and cache hits, and each worker's busy time, from the database
    (so every api instance reports the whole farm)."""

    def __init__(self, db: Database, settings: ServiceSettings) -> None:
        self.db, self.settings = db, settings

    def collect(self) -> Iterator[Metric]:
        try:
            with self.db.session() as session:
                metrics = self._metrics(session)
        except SQLAlchemyError:
            return
        yield from metrics

    def _metrics(self, session: Session) -> list[Metric]:
        depth = GaugeMetricFamily(
            "onnx_reducer_queue_depth", "Queued jobs per team and queue", labels=["team", "queue"]
        )
        for row in JobRepository(session).queue_depths():
            depth.add_metric([row.team, row.queue], row.jobs)
        checks, hits = JobRepository(session).check_totals()
        recent = IterationRepository(session).finished_since(utcnow() - timedelta(seconds=RATE_WINDOW_S))
        metrics: list[Metric] = [
            depth,
            CounterMetricFamily("onnx_reducer_checks", "Checks run, over all jobs", value=checks),
            GaugeMetricFamily(
                "onnx_reducer_checks_per_second",
                "Checks finished per second over the last minute",
                value=recent / RATE_WINDOW_S,
            ),
            CounterMetricFamily("onnx_reducer_verdict_cache_hits", "Verdicts answered from the cache", value=hits),
            GaugeMetricFamily(
                "onnx_reducer_verdict_cache_hit_ratio",
                "Cache hits / (cache hits + checks run)",
                value=hits / (hits + checks) if hits + checks else 0.0,
            ),
        ]
        return metrics + self._worker_metrics(session)

    def _worker_metrics(self, session: Session) -> list[Metric]:
        workers = load_workers(session, self.settings)
        states = GaugeMetricFamily("onnx_reducer_workers", "Workers by state", labels=["state"])
        for state in ("idle", "busy", "offline"):
            states.add_metric([state], sum(1 for w in workers if w.state == state))
        busy_s = CounterMetricFamily("onnx_reducer_worker_busy_seconds", "Time spent running jobs", labels=["worker"])
        utilisation = GaugeMetricFamily(
            "onnx_reducer_worker_utilisation", "Busy time / time since the worker started", labels=["worker"]
        )
        busy = GaugeMetricFamily("onnx_reducer_worker_busy", "1 while the worker runs a job", labels=["worker"])
        for worker in workers:
            busy_s.add_metric([worker.row.name], worker.busy_total_s)
            utilisation.add_metric([worker.row.name], worker.utilisation)
            busy.add_metric([worker.row.name], 1 if worker.busy else 0)
        return [states, busy_s, utilisation, busy]


def install_metrics(app: FastAPI, registry: CollectorRegistry, db: Database, settings: ServiceSettings) -> None:
    requests = Counter("onnx_reducer_http_requests", "HTTP requests", ["method", "route", "status"], registry=registry)
    latency = Histogram("onnx_reducer_http_request_seconds", "Request latency", ["method", "route"], registry=registry)
    registry.register(_JobsCollector(db))
    registry.register(_FarmCollector(db, settings))

    @app.middleware("http")
    async def measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")
        latency.labels(request.method, route).observe(time.perf_counter() - started)
        requests.labels(request.method, route, str(response.status_code)).inc()
        return response

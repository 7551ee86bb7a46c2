"""Prometheus metrics of one app instance (its own registry, so several apps can coexist)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.farm import load_workers
from persistence.config import ServiceSettings
from persistence.db import Database
from persistence.models import utcnow
from persistence.repositories import FarmVerdictRepository, IterationRepository, JobRepository
from persistence.repositories.webhooks import WebhookRepository

RATE_WINDOW_S = 60.0
CHECK_TIME_WINDOW_S = 300.0  # check time percentiles: over the checks finished this long ago or since
CHECK_TIME_QUANTILES = (0.5, 0.9, 0.99)


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (sorted), linear between the two nearest ranks."""
    if not values:
        return 0.0
    position = q * (len(values) - 1)
    low = int(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


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


class _WebhooksCollector(Collector):
    """Webhook deliveries by status (``pending`` ones waiting for a retry, ``failed`` ones given up)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily("onnx_reducer_webhook_deliveries", "Webhook deliveries by status", labels=["status"])
        try:
            with self.db.session() as session:
                counts = WebhookRepository(session).counts_by_status()
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
        return [depth, *self._check_metrics(session), *self._check_time(session), *self._worker_metrics(session)]

    def _check_time(self, session: Session) -> list[Metric]:
        """Percentiles of the check time over the checks of the last ``CHECK_TIME_WINDOW_S`` (a
        gauge per quantile: no series without checks), and how many checks they cover."""
        since = utcnow() - timedelta(seconds=CHECK_TIME_WINDOW_S)
        durations = sorted(IterationRepository(session).check_durations_since(since))
        seconds = GaugeMetricFamily(
            "onnx_reducer_check_seconds",
            f"Check time percentiles over the checks finished in the last {int(CHECK_TIME_WINDOW_S)} s",
            labels=["quantile"],
        )
        if durations:
            for q in CHECK_TIME_QUANTILES:
                seconds.add_metric([str(q)], quantile(durations, q))
        window = GaugeMetricFamily(
            "onnx_reducer_check_seconds_window_checks",
            f"Checks finished in the last {int(CHECK_TIME_WINDOW_S)} s (what onnx_reducer_check_seconds covers)",
            value=len(durations),
        )
        return [seconds, window]

    def _check_metrics(self, session: Session) -> list[Metric]:
        """Checks and cache hits per team (counters), the recent check rate and the hit ratios."""
        totals = JobRepository(session).check_totals()
        recent = IterationRepository(session).finished_since(utcnow() - timedelta(seconds=RATE_WINDOW_S))
        kept = FarmVerdictRepository(session).counts_by_team()
        checks = CounterMetricFamily("onnx_reducer_checks", "Checks run, per team", labels=["team"])
        rate = GaugeMetricFamily(
            "onnx_reducer_checks_per_second", "Checks finished per second over the last minute", labels=["team"]
        )
        hits = CounterMetricFamily(
            "onnx_reducer_verdict_cache_hits",
            "Verdicts answered without a check, per team and cache (job: the job's own, farm: earlier jobs')",
            labels=["team", "cache"],
        )
        for row in totals:
            checks.add_metric([row.team], row.checks)
            hits.add_metric([row.team, "job"], row.cache_hits - row.farm_hits)
            hits.add_metric([row.team, "farm"], row.farm_hits)
        for team in sorted({row.team for row in totals} | set(recent)):
            rate.add_metric([team], recent.get(team, 0) / RATE_WINDOW_S)
        farm = GaugeMetricFamily("onnx_reducer_farm_verdicts", "Verdicts in the farm cache, per team", labels=["team"])
        for team, count in sorted(kept.items()):
            farm.add_metric([team], count)
        all_checks = sum(row.checks for row in totals)
        all_hits = sum(row.cache_hits for row in totals)
        farm_hits = sum(row.farm_hits for row in totals)
        answers = all_checks + all_hits
        return [
            checks,
            rate,
            hits,
            GaugeMetricFamily(
                "onnx_reducer_verdict_cache_hit_ratio",
                "Cache hits (job and farm) / (cache hits + checks run), over all jobs",
                value=all_hits / answers if answers else 0.0,
            ),
            GaugeMetricFamily(
                "onnx_reducer_farm_cache_hit_ratio",
                "Farm cache hits / (cache hits + checks run), over all jobs",
                value=farm_hits / answers if answers else 0.0,
            ),
            farm,
        ]

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
    registry.register(_WebhooksCollector(db))
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


class TeamNeutralView(Collector):
    """``source``'s metrics with the ``team`` label summed away: what /metrics shows a scrape without
    the metrics token (farm totals, no team names, no team's own counters)."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        for family in self.source.collect():
            if not any("team" in sample.labels for sample in family.samples):
                yield family
                continue
            merged: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            for sample in family.samples:
                labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "team"))
                merged[(sample.name, labels)] = merged.get((sample.name, labels), 0.0) + sample.value
            neutral = Metric(family.name, family.documentation, family.type, family.unit)
            for (name, labels), value in merged.items():
                neutral.add_sample(name, dict(labels), value)
            yield neutral


def team_neutral_registry(source: CollectorRegistry) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TeamNeutralView(source))
    return registry

"""The app factory: ``create_app(settings, enqueue)``.

``enqueue`` hands a committed job to a runner: by default Celery by task name (``REDIS_URL``);
the embedded server passes its local runner instead."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CollectorRegistry

from api.metrics import install_metrics
from api.problems import install_problem_handlers
from api.routes import artifacts, events, health, jobs, workers
from api.services import Services
from api.settings import ApiSettings
from persistence.contracts import Enqueue, Notifier, no_notify
from persistence.db import Database
from persistence.layout import DataLayout

log = logging.getLogger("onnx_reducer.api")
STATIC_DIR = Path(__file__).resolve().parent / "static"


def _default_enqueue(settings: ApiSettings) -> Enqueue:
    if not settings.redis_url:
        raise ValueError("Without REDIS_URL the api needs a local runner (use `onnx-reducer serve`).")
    from api.enqueue import CeleryEnqueue

    return CeleryEnqueue(settings.redis_url)


def _default_notify(settings: ApiSettings) -> Notifier:
    if not settings.redis_url:
        return no_notify
    from persistence.notify import RedisNotifier

    return RedisNotifier(settings.redis_url)


def create_app(settings: ApiSettings, enqueue: Enqueue | None = None, notify: Notifier | None = None) -> FastAPI:
    db = Database(settings.database_url)
    registry = CollectorRegistry()
    services = Services(
        settings=settings,
        db=db,
        layout=DataLayout(settings.data_dir.resolve()),
        enqueue=enqueue or _default_enqueue(settings),
        notify=notify or _default_notify(settings),
        registry=registry,
    )
    services.layout.store  # creates the store's folders  # noqa: B018

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        db.dispose()

    app = FastAPI(
        title="onnx-reducer",
        version="0.1.0",
        description="Reduce a failing ONNX model to the smallest subgraph that still fails. "
        "Errors are RFC 9457 problem+json; authenticate with `Authorization: Bearer <team token>`.",
        lifespan=lifespan,
    )
    app.state.services = services
    install_problem_handlers(app)
    install_metrics(app, registry, db, settings)
    for module in (jobs, workers, events, artifacts, health):
        app.include_router(module.router)
    _install_web_ui(app)
    return app


def _install_web_ui(app: FastAPI) -> None:
    """The static web UI (api/static: plain HTML, CSS and JS) at ``/``, its files under ``/ui/``."""

    @app.get("/", include_in_schema=False)
    def web_ui() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/ui", StaticFiles(directory=STATIC_DIR, html=True), name="ui")

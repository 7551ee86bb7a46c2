"""The app factory: ``create_app(settings, enqueue)``.

``enqueue`` hands a committed job to a runner: by default Celery by task name (``REDIS_URL``);
the embedded server passes its local runner instead."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CollectorRegistry

from api.enqueue import CeleryEnqueue
from api.guide import router as guide_router
from api.intake_pool import IntakePool
from api.job_cache import JobReadCache
from api.metrics import install_metrics
from api.openapi_problems import install_problem_docs
from api.problems import install_problem_handlers
from api.routes import artifacts, bundle, events, graphs, health, jobs, me, tokens, webhooks, workers
from api.services import Services
from api.settings import ApiSettings
from api.shared_reads import SharedReads
from api.shedding import ShedMiddleware
from api.token_cache import TokenCache
from persistence.contracts import Enqueue, Notifier, no_notify
from persistence.db import Database
from persistence.layout import DataLayout
from persistence.notify import RedisNotifier
from persistence.s3store import S3ArtifactStore

log = logging.getLogger("onnx_reducer.api")
STATIC_DIR = Path(__file__).resolve().parent / "static"
# Swagger UI and ReDoc, shipped in the fastapi-offline wheel: /docs and /redoc work without internet.
DOCS_ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
# The docs pages may load nothing from elsewhere (ReDoc's sidebar asks a CDN for its logo).
DOCS_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
    "object-src 'none'; base-uri 'none'"
)


def _default_enqueue(settings: ApiSettings) -> Enqueue:
    if not settings.redis_url:
        raise ValueError("Without REDIS_URL the api needs a local runner (use `onnx-reducer serve`).")

    return CeleryEnqueue(settings.redis_url)


def _default_notify(settings: ApiSettings) -> Notifier:
    if not settings.redis_url:
        return no_notify

    return RedisNotifier(settings.redis_url)


def create_app(settings: ApiSettings, enqueue: Enqueue | None = None, notify: Notifier | None = None) -> FastAPI:
    db = Database(settings.database_url)
    registry = CollectorRegistry()
    services = Services(
        settings=settings,
        db=db,
        layout=DataLayout(settings.data_dir.resolve(), settings.s3_config(wait_out_outages=False)),
        enqueue=enqueue or _default_enqueue(settings),
        notify=notify or _default_notify(settings),
        registry=registry,
        intake=IntakePool(settings.intake_workers, settings.intake_max_pending, settings.retry_after_s),
        tokens=TokenCache(settings.token_cache_s),
        job_reads=JobReadCache(settings.job_read_cache_s),
        # streams woken by Redis read on their own; polling streams (embedded) share their reads
        event_reads=SharedReads(0.0 if settings.redis_url else settings.sse_poll_s / 2),
    )
    store = services.layout.store  # creates the store's folders (for S3: its local cache)
    if isinstance(store, S3ArtifactStore):
        store.ensure_bucket()
    swept = services.layout.sweep_staging(settings.staging_max_age_s)
    if swept:
        log.info("removed %d stale upload staging folder(s) left by an earlier api", len(swept))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Threads for blocking work (database queries, sync routes): more than the connection pool
        # holds only makes them wait for a connection and fight for the GIL.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.worker_threads
        yield
        services.intake.shutdown()
        db.dispose()

    app = FastAPI(
        title="onnx-reducer",
        version="0.1.0",
        description="Reduce a failing ONNX model to the smallest subgraph that still fails. "
        "Errors are RFC 9457 problem+json; authenticate with `Authorization: Bearer <team token>`.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.services = services
    install_problem_handlers(app)
    install_metrics(app, registry, db, settings)
    app.add_middleware(ShedMiddleware, max_inflight=settings.max_inflight_requests, retry_after_s=1)
    for module in (jobs, workers, events, artifacts, bundle, graphs, me, webhooks, tokens, health):
        app.include_router(module.router)
    _install_web_ui(app)
    app.include_router(guide_router)
    _install_offline_docs(app)
    install_problem_docs(app)
    return app


def _install_web_ui(app: FastAPI) -> None:
    """The static web UI (api/static: plain HTML, CSS and JS) at ``/``, its files under ``/ui/``."""

    @app.get("/", include_in_schema=False)
    def web_ui() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/ui", StaticFiles(directory=STATIC_DIR, html=True), name="ui")


def _install_offline_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) and ``/redoc`` from local assets under ``/docs-assets/``, no CDN."""
    assets = "/docs-assets"
    favicon = "/ui/favicon.svg"

    def local_only(page: HTMLResponse) -> HTMLResponse:
        page.headers["Content-Security-Policy"] = DOCS_CSP
        return page

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return local_only(
            get_swagger_ui_html(
                openapi_url="/openapi.json",
                title=f"{app.title} - API docs",
                oauth2_redirect_url="/docs/oauth2-redirect",
                swagger_js_url=f"{assets}/swagger-ui-bundle.js",
                swagger_css_url=f"{assets}/swagger-ui.css",
                swagger_favicon_url=favicon,
            )
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return local_only(
            get_redoc_html(
                openapi_url="/openapi.json",
                title=f"{app.title} - ReDoc",
                redoc_js_url=f"{assets}/redoc.standalone.js",
                redoc_favicon_url=favicon,
                with_google_fonts=False,
            )
        )

    app.mount(assets, StaticFiles(directory=DOCS_ASSETS_DIR), name="docs-assets")

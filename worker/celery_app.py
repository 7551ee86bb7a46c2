"""The Celery app, built by ``create_celery_app(settings)``.

``celery -A worker.celery_app worker -Q cpu`` finds ``app`` here; it is built on first access
(module ``__getattr__``), from the environment, never at import time.

The database is the queue (``worker.run_job``); a Celery message only wakes a worker, fire and
forget: no late acks, no rejection or requeue on a lost worker, no prefetch (a busy worker leaves
wake-ups to idle ones), json only. The solo pool acknowledges a message when its task returns, so
a worker killed meanwhile leaves its message in Redis, which hands it out again after its
visibility timeout (Celery's default hour) as one more wake-up: harmless, and nothing waits for
it. Lost work is found by every idle worker, which looks in the database every
``WORKER_POLL_S`` (``worker.process``); a wake-up that cannot be sent (Redis away) is logged and
dropped for the same reason."""

from __future__ import annotations

import functools
import logging
from typing import Any

from celery import Celery
from celery.signals import celeryd_after_setup, setup_logging, worker_ready, worker_shutdown
from kombu.entity import Queue

from checks.lifeline import kill_orphaned_checks, mark_owner
from persistence.contracts import QUEUES, RUN_JOB_TASK
from persistence.jsonlog import configure_logging
from persistence.notify import RedisNotifier
from worker.context import RunnerContext, context_from_settings, worker_name
from worker.process import WorkerProcess, lower_priority
from worker.settings import WorkerSettings, load_worker_settings
from worker.webhooks import WebhookDelivery

log = logging.getLogger("onnx_reducer.worker")


def _structured_logging(**_: Any) -> None:
    """Celery leaves logging to us when this signal has a receiver: JSON lines (persistence.jsonlog)."""
    configure_logging()


class _CeleryWorker:
    """The farm side of one Celery worker process, wired to Celery's signals."""

    def __init__(self, app: Celery, settings: WorkerSettings) -> None:
        self.app, self.settings = app, settings
        self.queues: list[str] = list(QUEUES)
        self._process: WorkerProcess | None = None
        self._webhooks: WebhookDelivery | None = None

    @functools.cached_property
    def ctx(self) -> RunnerContext:
        ctx = context_from_settings(self.settings, RedisNotifier(str(self.settings.redis_url)))
        ctx.wake = self.wake
        ctx.queues = tuple(self.queues)
        return ctx

    def wake(self, job_id: str, queue: str) -> None:
        """A check of ``job_id`` is queued: one wake-up for the workers of its queue, if Redis takes it."""
        try:
            self.app.send_task(RUN_JOB_TASK, args=[job_id], queue=queue)
        except Exception as exc:  # noqa: BLE001 - a wake-up is a hint: idle workers poll the database
            log.warning(
                "job %s: no wake-up sent (%s); idle workers find its work by polling", job_id, type(exc).__name__
            )

    @property
    def process(self) -> WorkerProcess:
        if self._process is None:
            self._process = WorkerProcess(self.settings, self.ctx, self.queues)
            self.ctx.on_work = self._process.activity.switch  # the farm view shows the job it works on
        return self._process

    def on_setup(self, sender: Any = None, instance: Any = None, **_: Any) -> None:
        """Before consuming: note the queues, mark and clean up check processes, detect capabilities."""
        app = self.app
        if getattr(instance, "app", None) is not app:
            return
        queues: Any = self.app.amqp.queues
        self.queues = [name for name in queues.consume_from if name in QUEUES] or ["cpu"]
        self.ctx.queues = tuple(self.queues)
        mark_owner()
        self.ctx.layout.use_scratch()  # temporary files under DATA_DIR/scratch, swept once this process is gone
        lower_priority(self.settings.worker_nice)
        killed = kill_orphaned_checks()
        if killed:
            log.warning("killed %d check processes left behind by a worker that is gone", killed)
        log.info("worker %s offers %s", worker_name(), self.process.identity.capabilities.to_json())

    def on_ready(self, sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is self.app:
            self.process.start()  # its heartbeat, its poll, its cancel watch: one scheduler
            self._webhooks = WebhookDelivery(self.ctx.db, self.settings).start()

    def on_shutdown(self, sender: Any = None, **_: Any) -> None:
        if self._webhooks is not None:
            self._webhooks.stop()
        if self._process is not None:
            self._process.stop()


def create_celery_app(settings: WorkerSettings) -> Celery:
    if not settings.redis_url:
        raise ValueError("The Celery worker needs REDIS_URL (e.g. redis://localhost:6379/0).")
    app = Celery("onnx_reducer", broker=settings.redis_url, set_as_current=False)
    app.conf.update(
        task_acks_late=False,
        worker_prefetch_multiplier=1,
        worker_disable_prefetch=True,
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        task_default_queue="cpu",
        task_queues=[Queue(name) for name in QUEUES],  # type: ignore[no-untyped-call]
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    worker = _CeleryWorker(app, settings)

    def run_job_task(job_id: str) -> str:
        """The whole task: take work from the database, starting with ``job_id``'s."""
        return worker.process.work(job_id).value

    app.task(name=RUN_JOB_TASK)(run_job_task)
    celeryd_after_setup.connect(worker.on_setup, weak=False)
    worker_ready.connect(worker.on_ready, weak=False)
    worker_shutdown.connect(worker.on_shutdown, weak=False)
    setup_logging.connect(_structured_logging, weak=False)
    return app


@functools.cache
def default_app() -> Celery:
    return create_celery_app(load_worker_settings())


def __getattr__(name: str) -> Celery:
    if name == "app":
        return default_app()
    raise AttributeError(name)

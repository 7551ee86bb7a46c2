"""The Celery app, built by ``create_celery_app(settings)``.

``celery -A worker.celery_app worker -Q cpu`` finds ``app`` here; it is built on first access
(module ``__getattr__``), from the environment, never at import time.

Settings follow ARCHITECTURE.md §3: late acks and prefetch 1 (a job is one long task), json only,
``visibility_timeout`` above the job time limit (Redis would otherwise hand a running job to a
second worker), and ``reject_on_worker_lost`` only because ``run_job``'s claim caps attempts."""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from celery import Celery, Task
from celery.signals import setup_logging, worker_ready
from kombu.entity import Queue

from persistence.contracts import QUEUES, RUN_JOB_TASK
from persistence.jsonlog import configure_logging
from persistence.notify import RedisNotifier
from persistence.repositories import ClaimResult
from worker.context import RunnerContext, context_from_settings
from worker.recovery import requeue_orphans
from worker.run_job import run_job
from worker.settings import WorkerSettings, load_worker_settings

log = logging.getLogger("onnx_reducer.worker")


def _structured_logging(**_: Any) -> None:
    """Celery leaves logging to us when this signal has a receiver: JSON lines (persistence.jsonlog)."""
    configure_logging()


def create_celery_app(settings: WorkerSettings) -> Celery:
    if not settings.redis_url:
        raise ValueError("The Celery worker needs REDIS_URL (e.g. redis://localhost:6379/0).")
    app = Celery("onnx_reducer", broker=settings.redis_url, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        task_default_queue="cpu",
        task_queues=[Queue(name) for name in QUEUES],  # type: ignore[no-untyped-call]
        broker_transport_options={"visibility_timeout": settings.visibility_timeout_s},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    context = functools.cache(lambda: context_from_settings(settings, RedisNotifier(str(settings.redis_url))))

    def run_job_task(self: Task, job_id: str) -> str:
        """The whole task: run the job; when another worker holds it, try again after its lease."""
        outcome = run_job(job_id, context())
        if outcome is ClaimResult.BUSY:
            raise self.retry(countdown=settings.job_lease_s)
        return outcome.value

    app.task(name=RUN_JOB_TASK, bind=True, max_retries=None)(run_job_task)

    def send(job_id: str, queue: str) -> None:
        app.send_task(RUN_JOB_TASK, args=[job_id], queue=queue)

    def on_ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            _start_recovery(context(), send, settings.job_lease_s)

    worker_ready.connect(on_ready, weak=False)
    setup_logging.connect(_structured_logging, weak=False)
    return app


def _start_recovery(ctx: RunnerContext, send: Any, lease_s: float) -> None:
    """Now and then, re-queue jobs whose worker died (their lease ran out)."""
    requeue_orphans(ctx, send, queued_older_than_s=lease_s)
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(max(lease_s, 5.0)):
            try:
                requeue_orphans(ctx, send, queued_older_than_s=None)
            except Exception:
                log.exception("orphan recovery failed")

    threading.Thread(target=loop, name="orphan-recovery", daemon=True).start()


@functools.cache
def default_app() -> Celery:
    return create_celery_app(load_worker_settings())


def __getattr__(name: str) -> Celery:
    if name == "app":
        return default_app()
    raise AttributeError(name)

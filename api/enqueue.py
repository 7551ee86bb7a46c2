"""Enqueue by task *name* through Celery's client (the api never imports the worker package)."""

from __future__ import annotations

from celery import Celery

from persistence.contracts import RUN_JOB_TASK


class CeleryEnqueue:
    def __init__(self, redis_url: str) -> None:
        self.app = Celery("onnx_reducer_api", broker=redis_url, set_as_current=False)
        self.app.conf.update(task_serializer="json", accept_content=["json"], broker_connection_retry_on_startup=True)

    def __call__(self, job_id: str, queue: str) -> None:
        self.app.send_task(RUN_JOB_TASK, args=[job_id], queue=queue)

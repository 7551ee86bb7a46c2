"""What crosses process boundaries: task names and queues (the api enqueues by name and never
imports the worker) and the pub/sub channel that wakes SSE followers (event payloads:
``persistence.events``)."""

from __future__ import annotations

from typing import Protocol

RUN_JOB_TASK = "onnx_reducer.run_job"
QUEUE_CPU = "cpu"
QUEUE_GPU = "gpu"
QUEUES = (QUEUE_CPU, QUEUE_GPU)
# interactive jobs (a person gives the verdicts through the api): no worker serves this queue
QUEUE_INTERACTIVE = "interactive"


def queue_for(needs_gpu: bool) -> str:
    return QUEUE_GPU if needs_gpu else QUEUE_CPU


def events_channel(job_id: str) -> str:
    """Redis pub/sub channel announcing new event rows of a job (the rows are the truth)."""
    return f"onnx-reducer:job:{job_id}:events"


class Enqueue(Protocol):
    """Hands a committed job to whatever runs jobs (Celery by task name, or the local runner)."""

    def __call__(self, job_id: str, queue: str) -> None: ...


class Notifier(Protocol):
    """Announces that a job has new events (after the commit that stored them)."""

    def __call__(self, job_id: str, seq: int) -> None: ...


def no_notify(job_id: str, seq: int) -> None:
    """Embedded mode: followers poll the database."""

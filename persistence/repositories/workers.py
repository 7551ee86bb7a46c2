"""Workers: the rows worker processes keep fresh with a heartbeat (``worker/presence.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from persistence.models import Worker, utcnow


@dataclass(frozen=True)
class WorkerStatus:
    """What a worker reports on each heartbeat."""

    name: str
    host: str
    queues: list[str]
    capabilities: dict[str, Any]
    current_job_id: str | None
    busy_since: datetime | None
    busy_s: float
    jobs_done: int
    started_at: datetime


class WorkerRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def report(self, status: WorkerStatus) -> None:
        """Insert or refresh the worker's row (each worker writes only its own)."""
        row = self.session.get(Worker, status.name)
        if row is None:
            row = Worker(name=status.name)
            self.session.add(row)
        row.host, row.queues, row.capabilities = status.host, list(status.queues), dict(status.capabilities)
        row.current_job_id, row.busy_since = status.current_job_id, status.busy_since
        row.busy_s, row.jobs_done, row.started_at = status.busy_s, status.jobs_done, status.started_at
        row.heartbeat_at = utcnow()
        self.session.flush()

    def remove(self, name: str) -> None:
        self.session.execute(delete(Worker).where(Worker.name == name))

    def all(self) -> Sequence[Worker]:
        return self.session.scalars(select(Worker).order_by(Worker.started_at, Worker.name)).all()

    def forget_silent(self, seconds: float) -> int:
        """Drop the rows of workers without a heartbeat for ``seconds``; how many were dropped."""
        since = utcnow() - timedelta(seconds=seconds)
        gone = self.session.execute(delete(Worker).where(Worker.heartbeat_at < since).returning(Worker.name))
        return len(gone.all())

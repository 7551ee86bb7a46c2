"""The farm as the api shows it: workers (online when their heartbeat is recent), what each is
doing, and why a queued job is still waiting (``waiting_reason``)."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from checks.capabilities import Capabilities, unmet
from persistence.config import ServiceSettings
from persistence.enums import JobStatus
from persistence.models import Job, Worker, utcnow
from persistence.repositories import WorkerRepository
from persistence.requirements import stored_requirements


@dataclass(frozen=True)
class WorkerView:
    row: Worker
    online: bool
    capabilities: Capabilities
    busy_total_s: float  # busy time since the worker started, the current job included
    uptime_s: float

    @property
    def busy(self) -> bool:
        return self.online and self.row.current_job_id is not None

    @property
    def state(self) -> str:
        return "offline" if not self.online else "busy" if self.busy else "idle"

    @property
    def utilisation(self) -> float:
        return min(self.busy_total_s / self.uptime_s, 1.0) if self.uptime_s > 0 else 0.0


def load_workers(session: Session, settings: ServiceSettings) -> list[WorkerView]:
    """Every worker that reported within ``WORKER_FORGET_AFTER_S``."""
    now = utcnow()
    views = []
    for row in WorkerRepository(session).all():
        silent = (now - _aware(row.heartbeat_at)).total_seconds()
        if silent > settings.worker_forget_after_s:
            continue
        views.append(
            WorkerView(
                row=row,
                online=silent <= settings.worker_offline_after_s,
                capabilities=Capabilities.from_json(row.capabilities),
                busy_total_s=row.busy_s + _since(row.busy_since, now),
                uptime_s=(now - _aware(row.started_at)).total_seconds(),
            )
        )
    return views


def waiting_reason(job: Job, workers: Sequence[WorkerView]) -> str | None:
    """Why a queued job has not started, or None when a free worker that can run it is online."""
    if job.status != JobStatus.QUEUED:
        return None
    online = [w for w in workers if w.online]
    if not online:
        return "no worker online"
    summary = f"{len(online)} worker{'s' if len(online) != 1 else ''} online: {describe(online)}"
    serving = [w for w in online if job.queue in w.row.queues]
    if not serving:
        return f"no worker serves queue '{job.queue}' ({summary})"
    requirements = stored_requirements(job.requires)
    missing = [unmet(requirements, w.capabilities) for w in serving]
    able = [w for w, lacks in zip(serving, missing, strict=True) if not lacks]
    if not able:
        return f"no worker offers {_missing_everywhere(missing)} ({summary})"
    if all(w.busy for w in able):
        return f"waiting for a free worker ({len(able)} can run it, all busy)"
    return None


def describe(workers: Sequence[WorkerView]) -> str:
    """``cpu x2`` / ``NVIDIA H100 80GB HBM3 x1, cpu x1``: workers counted by GPU model."""
    counts = collections.Counter(w.capabilities.label for w in workers)
    return ", ".join(f"{label} x{n}" for label, n in sorted(counts.items()))


def _missing_everywhere(missing: Sequence[list[str]]) -> str:
    """The requirements no worker meets; when each is met somewhere but never all together, all."""
    common = [phrase for phrase in missing[0] if all(phrase in lacks for lacks in missing)]
    if common:
        return ", ".join(common)
    every = list(dict.fromkeys(phrase for lacks in missing for phrase in lacks))
    return "all of " + ", ".join(every)


def _aware(moment: datetime) -> datetime:
    """SQLite hands datetimes back without a zone; they were stored as UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _since(moment: datetime | None, now: datetime) -> float:
    return max((now - _aware(moment)).total_seconds(), 0.0) if moment is not None else 0.0


__all__ = ["WorkerView", "describe", "load_workers", "waiting_reason"]

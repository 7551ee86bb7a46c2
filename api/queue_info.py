"""What ``GET /v1/jobs/{id}`` adds for one job: the checks running now over the farm, and, while
the job is queued, its place in line (teams take turns by share: ``persistence.fairshare``) and
an estimated start: a queued job starts when a worker frees up and its team's turn comes, so
``mean check time x ceil(position / workers)`` from now (no estimate before a check finished)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from api.schemas import CheckInFlight, JobOut, utc
from persistence.config import ServiceSettings
from persistence.enums import JobStatus
from persistence.fairshare import jobs_ahead, parse_shares
from persistence.models import Job, utcnow
from persistence.repositories import JobRepository, TeamRepository
from persistence.repositories.units import UnitRepository


def with_dispatch(session: Session, job: Job, out: JobOut, settings: ServiceSettings) -> JobOut:
    units = UnitRepository(session)
    out.checks_in_flight = [
        CheckInFlight(
            iteration=u.iteration, phase=u.phase, nodes=u.nodes, worker=u.worker, started_at=utc(u.started_at)
        )
        for u in units.in_flight(job.id)
    ]
    if job.status == JobStatus.QUEUED:
        position = 1 + jobs_ahead(
            job.id,
            TeamRepository(session).name_of(job.team_id),
            JobRepository(session).queued_line(job.queue),
            parse_shares(settings.team_shares),
        )
        out.queue_position = position
        workers = units.live_workers(job.queue, settings.worker_offline_after_s)
        out.estimated_start_at = estimated_start(position, workers, units.mean_duration())
    return out


def estimated_start(position: int, workers: int, mean_check_s: float | None) -> datetime | None:
    if mean_check_s is None or workers < 1:
        return None
    return utcnow() + timedelta(seconds=mean_check_s * math.ceil(position / workers))

"""Every query of the service lives in these repositories (one per aggregate)."""

from persistence.repositories.artifacts import ArtifactRepository
from persistence.repositories.events import EventRepository
from persistence.repositories.farm_verdicts import FarmVerdictRepository, SharedVerdict
from persistence.repositories.iterations import CachedAnswer, IterationRepository
from persistence.repositories.jobs import (
    RETRYABLE_ERRORS,
    CancelOutcome,
    CheckTotals,
    ClaimResult,
    JobPage,
    JobRepository,
    QueueDepth,
)
from persistence.repositories.teams import TeamRepository
from persistence.repositories.workers import WorkerRepository, WorkerStatus

__all__ = [
    "RETRYABLE_ERRORS",
    "ArtifactRepository",
    "CachedAnswer",
    "CancelOutcome",
    "CheckTotals",
    "ClaimResult",
    "EventRepository",
    "FarmVerdictRepository",
    "IterationRepository",
    "JobPage",
    "JobRepository",
    "QueueDepth",
    "SharedVerdict",
    "TeamRepository",
    "WorkerRepository",
    "WorkerStatus",
]

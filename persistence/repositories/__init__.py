"""Every query of the service lives in these repositories (one per aggregate)."""

from persistence.repositories.artifacts import ArtifactRepository
from persistence.repositories.events import EventRepository
from persistence.repositories.iterations import IterationRepository
from persistence.repositories.jobs import (
    RETRYABLE_ERRORS,
    CancelOutcome,
    ClaimResult,
    DispatchCandidate,
    JobPage,
    JobRepository,
    QueueDepth,
    claimable,
)
from persistence.repositories.teams import TeamRepository
from persistence.repositories.workers import WorkerRepository, WorkerStatus

__all__ = [
    "RETRYABLE_ERRORS",
    "ArtifactRepository",
    "CancelOutcome",
    "ClaimResult",
    "DispatchCandidate",
    "EventRepository",
    "IterationRepository",
    "JobPage",
    "JobRepository",
    "QueueDepth",
    "TeamRepository",
    "WorkerRepository",
    "WorkerStatus",
    "claimable",
]

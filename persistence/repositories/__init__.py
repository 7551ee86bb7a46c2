"""Every query of the service lives in these repositories (one per aggregate)."""

from persistence.repositories.artifacts import ArtifactRepository
from persistence.repositories.events import EventRepository
from persistence.repositories.iterations import IterationRepository
from persistence.repositories.jobs import RETRYABLE_ERRORS, CancelOutcome, ClaimResult, JobPage, JobRepository
from persistence.repositories.teams import TeamRepository

__all__ = [
    "RETRYABLE_ERRORS",
    "ArtifactRepository",
    "CancelOutcome",
    "ClaimResult",
    "EventRepository",
    "IterationRepository",
    "JobPage",
    "JobRepository",
    "TeamRepository",
]

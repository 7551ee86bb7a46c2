"""What the routes share, held on ``app.state`` (built by the app factory)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from api.intake_pool import IntakePool
from api.job_cache import JobReadCache
from api.settings import ApiSettings
from api.shared_reads import SharedReads
from api.token_cache import TokenCache
from persistence.contracts import Enqueue, Notifier
from persistence.db import Database
from persistence.layout import DataLayout
from persistence.models import Event


@dataclass
class Services:
    settings: ApiSettings
    db: Database
    layout: DataLayout
    enqueue: Enqueue
    notify: Notifier
    registry: CollectorRegistry
    intake: IntakePool
    tokens: TokenCache
    job_reads: JobReadCache
    event_reads: SharedReads[tuple[str, int], tuple[list[Event], bool]]

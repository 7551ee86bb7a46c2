"""What the routes share, held on ``app.state`` (built by the app factory)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

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

MAX_INTERACTIVE_STEPS = 2  # interactive steps (model loads and writes) running at once in one app


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
    # the interactive steps this app runs at once (``api.interactive``): its own, not the process's
    interactive_steps: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(MAX_INTERACTIVE_STEPS)
    )

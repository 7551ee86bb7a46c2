"""What the routes share, held on ``app.state`` (built by the app factory)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from api.intake_pool import IntakePool
from api.settings import ApiSettings
from api.token_cache import TokenCache
from persistence.contracts import Enqueue, Notifier
from persistence.db import Database
from persistence.layout import DataLayout


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

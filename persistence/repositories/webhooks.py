"""Webhook endpoints (a team's) and their deliveries: the outbox the workers deliver from.

A delivery is ``pending`` until due (``next_attempt_at``), ``delivering`` while a worker holds it
(claimed by a conditional UPDATE, so one worker wins it on PostgreSQL and SQLite alike; its
``next_attempt_at`` is then the end of that worker's lease, after which any worker takes it again
with the same id: at-least-once), and ends ``succeeded``, ``failed`` (out of time) or ``dropped``
(its job was deleted before it was sent: the event's links would answer 404)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, exists, func, or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from persistence.models import Job, WebhookDelivery, WebhookEndpoint, utcnow

PENDING, DELIVERING, SUCCEEDED, FAILED, DROPPED = "pending", "delivering", "succeeded", "failed", "dropped"
DUE = (PENDING, DELIVERING)
ENDED = (SUCCEEDED, FAILED, DROPPED)
JOB_DELETED = "not sent: its job was deleted (the event's links would answer 404)"
GONE = 410
ENDPOINT_GONE = "not sent: the endpoint was disabled (its receiver answered 410 Gone)"


@dataclass(frozen=True)
class Claimed:
    """A delivery a worker holds for one attempt (``attempt``: its number, from 1)."""

    id: str
    attempt: int
    url: str
    secret: str
    body: str
    created_at: datetime


@dataclass(frozen=True)
class AttemptResult:
    """How an attempt went: ``status_code`` (None when no answer came) and ``error`` (None: a 2xx)."""

    status_code: int | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


class WebhookRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    # -- endpoints --

    def add_endpoint(self, endpoint: WebhookEndpoint) -> WebhookEndpoint:
        self.session.add(endpoint)
        self.session.flush()
        return endpoint

    def endpoints(self, team_id: str) -> Sequence[WebhookEndpoint]:
        query = select(WebhookEndpoint).where(WebhookEndpoint.team_id == team_id)
        return self.session.scalars(query.order_by(WebhookEndpoint.created_at, WebhookEndpoint.id)).all()

    def endpoint(self, team_id: str, endpoint_id: str) -> WebhookEndpoint | None:
        """The team's endpoint ``endpoint_id``; None for another team's (it answers 404)."""
        found = self.session.get(WebhookEndpoint, endpoint_id)
        return found if found is not None and found.team_id == team_id else None

    def delete_endpoint(self, team_id: str, endpoint_id: str) -> bool:
        """Remove the team's endpoint and its delivery log; False (nothing removed) when it has none
        such, also when ``endpoint_id`` is another team's."""
        if self.endpoint(team_id, endpoint_id) is None:
            return False
        self.session.execute(delete(WebhookDelivery).where(WebhookDelivery.endpoint_id == endpoint_id))
        self.session.execute(delete(WebhookEndpoint).where(WebhookEndpoint.id == endpoint_id))
        return True

    # -- deliveries --

    def add_delivery(self, delivery: WebhookDelivery) -> None:
        delivery.next_attempt_at = delivery.created_at = utcnow()
        self.session.add(delivery)

    def deliveries(self, endpoint_id: str, limit: int = 50) -> Sequence[WebhookDelivery]:
        """The endpoint's log, newest first."""
        query = select(WebhookDelivery).where(WebhookDelivery.endpoint_id == endpoint_id)
        return self.session.scalars(query.order_by(WebhookDelivery.created_at.desc()).limit(limit)).all()

    def due(self, limit: int) -> list[str]:
        """Deliveries due now: pending ones whose time came, and held ones whose worker's lease ran out."""
        query = (
            select(WebhookDelivery.id)
            .where(WebhookDelivery.status.in_(DUE), WebhookDelivery.next_attempt_at <= utcnow())
            .order_by(WebhookDelivery.next_attempt_at)
            .limit(limit)
        )
        return list(self.session.scalars(query))

    def drop_for_deleted_jobs(self) -> list[tuple[str, str]]:
        """End the pending deliveries whose job was deleted since they were queued as ``dropped``
        (``JOB_DELETED`` in their log): (delivery id, job id) of each."""
        query = select(WebhookDelivery.id, WebhookDelivery.job_id).where(
            WebhookDelivery.status == PENDING, WebhookDelivery.job_id.is_not(None), ~_job_exists()
        )
        gone = [(str(row[0]), str(row[1])) for row in self.session.execute(query).all()]
        if gone:
            self.session.execute(
                update(WebhookDelivery)
                .where(WebhookDelivery.id.in_([delivery for delivery, _ in gone]), WebhookDelivery.status == PENDING)
                .values(status=DROPPED, last_error=JOB_DELETED, next_attempt_at=utcnow())
            )
        return gone

    def claim(self, delivery_id: str, lease_s: float) -> Claimed | None:
        """Take ``delivery_id`` for one attempt if it is still due (another worker may have won it)
        and its job, if it has one, was not deleted (``drop_for_deleted_jobs`` ends it then)."""
        now = utcnow()
        taken = self.session.execute(
            update(WebhookDelivery)
            .where(
                WebhookDelivery.id == delivery_id,
                WebhookDelivery.status.in_(DUE),
                WebhookDelivery.next_attempt_at <= now,
                or_(WebhookDelivery.job_id.is_(None), _job_exists()),
                _endpoint_enabled(),
            )
            .values(
                status=DELIVERING,
                attempts=WebhookDelivery.attempts + 1,
                next_attempt_at=now + timedelta(seconds=lease_s),
                last_attempt_at=now,
            )
        )
        if not getattr(taken, "rowcount", 0):
            return None
        row = self.session.execute(
            select(WebhookDelivery, WebhookEndpoint.url, WebhookEndpoint.secret)
            .join(WebhookEndpoint, WebhookEndpoint.id == WebhookDelivery.endpoint_id)
            .where(WebhookDelivery.id == delivery_id)
        ).one()
        delivery: WebhookDelivery = row[0]
        return Claimed(delivery.id, delivery.attempts, row[1], row[2], delivery.body, _aware(delivery.created_at))

    def record_attempt(self, claimed: Claimed, result: AttemptResult, retry_at: datetime | None) -> bool:
        """Write how ``claimed``'s attempt went: succeeded, due again at ``retry_at``, or failed
        for good (``retry_at`` None). Only while this worker still holds it (the same attempt):
        returns False when its lease ran out and another attempt took over."""
        if result.ok:
            values: dict[str, object] = {"status": SUCCEEDED, "delivered_at": utcnow()}
        else:
            values = {"status": PENDING if retry_at else FAILED, "next_attempt_at": retry_at or utcnow()}
        done = self.session.execute(
            update(WebhookDelivery)
            .where(
                WebhookDelivery.id == claimed.id,
                WebhookDelivery.status == DELIVERING,
                WebhookDelivery.attempts == claimed.attempt,
            )
            .values(last_status_code=result.status_code, last_error=result.error, **values)
        )
        return bool(getattr(done, "rowcount", 0))

    def disable_endpoint_of(self, claimed: Claimed, reason: str) -> list[str]:
        """Disable the endpoint ``claimed`` went to (its receiver answered 410 Gone: Standard
        Webhooks' "stop sending") and end its pending deliveries ``dropped``; their ids."""
        endpoint_id = select(WebhookDelivery.endpoint_id).where(WebhookDelivery.id == claimed.id).scalar_subquery()
        now = utcnow()
        self.session.execute(
            update(WebhookEndpoint)
            .where(WebhookEndpoint.id == endpoint_id, WebhookEndpoint.disabled_at.is_(None))
            .values(disabled_at=now, disabled_reason=reason[:300])
        )
        pending = select(WebhookDelivery.id).where(
            WebhookDelivery.endpoint_id == endpoint_id, WebhookDelivery.status == PENDING
        )
        dropped = [str(delivery) for delivery in self.session.scalars(pending)]
        if dropped:
            self.session.execute(
                update(WebhookDelivery)
                .where(WebhookDelivery.id.in_(dropped), WebhookDelivery.status == PENDING)
                .values(status=DROPPED, last_error=ENDPOINT_GONE, next_attempt_at=now)
            )
        return dropped

    def counts_by_status(self) -> dict[str, int]:
        """How many deliveries the log holds in each status (every team's: ``/metrics``)."""
        query = select(WebhookDelivery.status, func.count()).group_by(WebhookDelivery.status)
        return {status: int(count) for status, count in self.session.execute(query).all()}

    def prune(self, before: datetime) -> int:
        """Forget the deliveries that ended (succeeded, failed or dropped) and were created before ``before``."""
        query = delete(WebhookDelivery).where(WebhookDelivery.status.in_(ENDED), WebhookDelivery.created_at < before)
        return int(getattr(self.session.execute(query), "rowcount", 0) or 0)


def _job_exists() -> ColumnElement[bool]:
    """The delivery's job still has its row (a deleted job's rows are gone)."""
    return exists(select(Job.id).where(Job.id == WebhookDelivery.job_id))


def _endpoint_enabled() -> ColumnElement[bool]:
    """The delivery's endpoint was not disabled (a 410 Gone)."""
    return exists(
        select(WebhookEndpoint.id).where(
            WebhookEndpoint.id == WebhookDelivery.endpoint_id, WebhookEndpoint.disabled_at.is_(None)
        )
    )


def _aware(moment: datetime) -> datetime:
    """``moment`` in UTC with its zone: SQLite gives back the stored time without it."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)

"""A team's webhooks: ``POST/GET /v1/webhooks``, ``GET/DELETE /v1/webhooks/{id}``, the delivery
log ``GET /v1/webhooks/{id}/deliveries`` and ``POST /v1/webhooks/{id}/test``.

The api only registers endpoints and queues test events; the workers deliver (``worker.webhooks``).
A URL whose host resolves to a private, loopback, link-local or metadata address is refused
(422) unless the operator allows it (``WEBHOOK_ALLOW_PRIVATE``, ``WEBHOOK_ALLOWED_NETWORKS``)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from api.deps import ServicesDep, TeamDep
from api.problems import ProblemError, not_found
from api.schemas import UtcDatetime, utc
from persistence.models import Team, WebhookDelivery, WebhookEndpoint
from persistence.repositories.webhooks import WebhookRepository
from persistence.webhooks import (
    EVENT_TYPES,
    TEST_EVENT,
    TargetPolicy,
    WebhookTargetError,
    check_events,
    check_target,
    event_body,
    new_delivery,
    new_secret,
    test_event_data,
)

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
MAX_ENDPOINTS = 20  # per team


class WebhookIn(BaseModel):
    url: str = Field(description="Where to POST the events: https://... (a public address unless the operator allows)")
    events: list[str] = Field(
        default_factory=lambda: list(EVENT_TYPES),
        description=f"Event types wanted, any of {', '.join(EVENT_TYPES)} (default: all)",
    )
    description: str = Field(default="", max_length=200)


class WebhookOut(BaseModel):
    id: str
    url: str
    events: list[str]
    description: str
    created_at: datetime
    secret_hint: str = Field(description="The secret's first characters (the whole secret is shown once, at creation)")
    disabled_at: datetime | None = Field(
        default=None, description="When its receiver answered 410 Gone: nothing more is sent (register it again)"
    )
    disabled_reason: str | None = None


class WebhookCreated(WebhookOut):
    secret: str = Field(description="whsec_...: verify each delivery's webhook-signature with it. Shown only now.")


class WebhookList(BaseModel):
    items: list[WebhookOut]


class DeliveryOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # built from a WebhookDelivery row

    id: str = Field(description="The webhook-id header of every attempt")
    event_type: str
    job_id: str | None
    status: str = Field(
        description="pending, delivering, succeeded, failed (gave up after a day) or dropped (its job was deleted "
        "before it was sent)"
    )
    attempts: int
    last_status_code: int | None
    last_error: str | None
    created_at: UtcDatetime
    last_attempt_at: UtcDatetime | None
    next_attempt_at: UtcDatetime | None
    delivered_at: UtcDatetime | None


class DeliveryList(BaseModel):
    items: list[DeliveryOut]


def _endpoint_out(endpoint: WebhookEndpoint) -> WebhookOut:
    return WebhookOut(
        id=endpoint.id,
        url=endpoint.url,
        events=list(endpoint.events),
        description=endpoint.description,
        created_at=utc(endpoint.created_at) or endpoint.created_at,
        secret_hint=endpoint.secret[:10] + "...",
        disabled_at=utc(endpoint.disabled_at),
        disabled_reason=endpoint.disabled_reason,
    )


def _delivery_out(row: WebhookDelivery) -> DeliveryOut:
    out = DeliveryOut.model_validate(row)
    waiting = row.status in ("pending", "delivering")
    return out if waiting else out.model_copy(update={"next_attempt_at": None})


def _invalid(exc: WebhookTargetError) -> ProblemError:
    return ProblemError(422, "Unprocessable Content", str(exc))


@router.post("", status_code=201, response_model=WebhookCreated)
def create_webhook(body: WebhookIn, services: ServicesDep, team: TeamDep) -> WebhookCreated:
    """Register an endpoint for your team's job events. The answer holds its secret, once."""
    settings = services.settings
    policy = TargetPolicy.from_settings(settings.webhook_allow_private, settings.webhook_allowed_networks)
    try:
        events = check_events(body.events)
        check_target(body.url.strip(), policy)
    except WebhookTargetError as exc:
        raise _invalid(exc) from exc
    with services.db.session() as session:
        webhooks = WebhookRepository(session)
        if len(webhooks.endpoints(team.id)) >= MAX_ENDPOINTS:
            raise ProblemError(409, "Conflict", f"A team has at most {MAX_ENDPOINTS} webhooks; delete one first.")
        endpoint = webhooks.add_endpoint(
            WebhookEndpoint(
                team_id=team.id, url=body.url.strip(), events=events, secret=new_secret(), description=body.description
            )
        )
        return WebhookCreated(**_endpoint_out(endpoint).model_dump(), secret=endpoint.secret)


@router.get("", response_model=WebhookList)
def list_webhooks(services: ServicesDep, team: TeamDep) -> WebhookList:
    """Your team's endpoints (their secrets are not shown again)."""
    with services.db.session() as session:
        return WebhookList(items=[_endpoint_out(e) for e in WebhookRepository(session).endpoints(team.id)])


def _own(services: ServicesDep, team: Team, webhook_id: str) -> WebhookEndpoint:
    with services.db.session() as session:
        endpoint = WebhookRepository(session).endpoint(team.id, webhook_id)
    if endpoint is None:
        raise not_found(f"Webhook '{webhook_id}'")
    return endpoint


@router.get("/{webhook_id}", response_model=WebhookOut)
def get_webhook(webhook_id: str, services: ServicesDep, team: TeamDep) -> WebhookOut:
    return _endpoint_out(_own(services, team, webhook_id))


@router.delete("/{webhook_id}", status_code=204)
def delete_webhook(webhook_id: str, services: ServicesDep, team: TeamDep) -> Response:
    """Remove the endpoint and its delivery log; nothing more is sent to it."""
    with services.db.session() as session:
        if not WebhookRepository(session).delete_endpoint(team.id, webhook_id):
            raise not_found(f"Webhook '{webhook_id}'")
    return Response(status_code=204)


@router.get("/{webhook_id}/deliveries", response_model=DeliveryList)
def list_deliveries(webhook_id: str, services: ServicesDep, team: TeamDep) -> DeliveryList:
    """The endpoint's delivery log, newest first (the last 50): status, attempts, last error."""
    _own(services, team, webhook_id)
    with services.db.session() as session:
        return DeliveryList(items=[_delivery_out(row) for row in WebhookRepository(session).deliveries(webhook_id)])


@router.post("/{webhook_id}/test", status_code=202, response_model=DeliveryOut)
def send_test_event(webhook_id: str, services: ServicesDep, team: TeamDep) -> DeliveryOut:
    """Queue a ``webhook.test`` event for the endpoint; a worker delivers it like any other (see
    its delivery log)."""
    endpoint = _own(services, team, webhook_id)
    if endpoint.disabled_at is not None:
        raise ProblemError(
            409,
            "Webhook disabled",
            f"Webhook '{webhook_id}' is disabled: {endpoint.disabled_reason}. Delete it and register the URL again.",
        )
    delivery = new_delivery(endpoint, TEST_EVENT, event_body(TEST_EVENT, test_event_data(endpoint)), None)
    with services.db.session() as session:
        WebhookRepository(session).add_delivery(delivery)
        session.flush()
        return _delivery_out(delivery)

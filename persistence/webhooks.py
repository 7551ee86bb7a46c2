"""Webhooks, the parts the api and the workers share: the event types a team may subscribe to, the
endpoint's secret and the Standard Webhooks signature (https://www.standardwebhooks.com), the body
of each event, the outbox rows written in the transaction that records the event
(``queue_deliveries``, called by ``persistence.events.record_event``), and the guard that refuses
private-network targets (``check_target``: at registration and again before every attempt).

Delivery itself (HTTP, retries with backoff) is the workers' (``worker.webhooks``)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import secrets
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.orm import Session

from persistence.enums import EventKind
from persistence.models import Job, WebhookDelivery, WebhookEndpoint, utcnow
from persistence.repositories.webhooks import WebhookRepository

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 24  # Standard Webhooks: between 24 and 64 bytes
TEST_EVENT = "webhook.test"
# what a team subscribes to, and the event of a job that each one stands for
EVENT_TYPES: dict[str, EventKind] = {
    "job.succeeded": EventKind.SUCCEEDED,
    "job.failed": EventKind.FAILED,
    "job.cancelled": EventKind.CANCELLED,
    "job.needs-answer": EventKind.VERDICT_NEEDED,
}
_TYPE_OF_KIND = {kind: name for name, kind in EVENT_TYPES.items()}


def new_secret() -> str:
    """A fresh endpoint secret: ``whsec_`` + base64 of 24 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def new_message_id() -> str:
    """A delivery's ``webhook-id`` (the same on every attempt)."""
    return "msg_" + secrets.token_hex(16)


def sign(secret: str, message_id: str, timestamp: int, body: str) -> str:
    """The ``webhook-signature`` header: ``v1,`` + base64 of HMAC-SHA256, keyed by the secret's
    base64-decoded bytes, over ``{id}.{timestamp}.{body}``."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    digest = hmac.new(key, f"{message_id}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signed_headers(secret: str, message_id: str, timestamp: int, body: str) -> dict[str, str]:
    """The headers of one attempt to deliver ``body``."""
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, message_id, timestamp, body),
    }


# -- what is sent --


def job_links(job_id: str) -> dict[str, str]:
    """Where a receiver reads more of the job: paths on the api (``with_public_url``)."""
    base = f"/v1/jobs/{job_id}"
    page = f"/#/jobs/{job_id}"
    return {
        "self": base,
        "page": page,
        "events": f"{base}/events",
        "min_bad": f"{base}/artifacts/min-bad",
        "min_good": f"{base}/artifacts/min-good",
        "bundle": f"{base}/bundle",
    }


def event_body(event_type: str, data: Mapping[str, Any], at: datetime | None = None) -> str:
    """The body of a delivery (Standard Webhooks' shape: ``type``, ``timestamp``, ``data``)."""
    timestamp = (at or utcnow()).isoformat().replace("+00:00", "Z")
    return json.dumps({"type": event_type, "timestamp": timestamp, "data": dict(data)}, separators=(",", ":"))


def job_event_data(job: Job, kind: EventKind, payload: Mapping[str, Any]) -> dict[str, Any]:
    """What a job's event says to a receiver: its outcome (status, error, node counts, checks,
    min-bad node names, verified status) or, for ``job.needs-answer``, the check it asks about."""
    status = str(payload.get("status", job.status))  # the payload's: a cancel ended the row by an UPDATE
    data: dict[str, Any] = {"job_id": job.id, "status": status, "links": job_links(job.id)}
    if kind is EventKind.VERDICT_NEEDED:
        data["question"] = {key: payload.get(key) for key in ("iteration", "phase", "nodes")}
        data["links"]["verdict"] = data["links"]["self"] + "/verdict"
        data["links"]["model"] = data["links"]["self"] + f"/artifacts/iteration/{payload.get('artifact', '')}"
        return data
    error = payload.get("error_code")
    data |= {
        "outcome": status,
        "error": {"code": error, "message": payload.get("error_message")} if error else None,
        "nodes_before": payload.get("nodes_before"),
        "nodes_after": payload.get("nodes_after"),
        "checks_run": payload.get("checks_run"),
        "min_bad_nodes": list(payload.get("min_bad_nodes") or []),
        "verified": payload.get("verified"),
    }
    return data


def with_public_url(body: str, public_url: str) -> str:
    """``body`` with its links made absolute on ``public_url`` (``PUBLIC_URL``; empty: as it is).
    The same stored body and setting give the same bytes on every attempt."""
    if not public_url:
        return body
    event = json.loads(body)
    links = event.get("data", {}).get("links")
    if not isinstance(links, dict):
        return body
    base = public_url.rstrip("/")
    event["data"]["links"] = {key: base + value for key, value in links.items()}
    return json.dumps(event, separators=(",", ":"))


def test_event_data(endpoint: WebhookEndpoint) -> dict[str, Any]:
    """What ``POST /v1/webhooks/{id}/test`` sends."""
    return {"webhook_id": endpoint.id, "message": "A test event from onnx-reducer: this endpoint is reachable."}


def queue_deliveries(db: Session, job: Job | str, kind: EventKind, payload: Mapping[str, Any]) -> int:
    """The outbox rows of a job's event, one per endpoint of the job's team that wants it, in the
    caller's transaction (so an event recorded is an event delivered, and one rolled back is none).
    Returns how many. Its links are paths; the delivering worker makes them absolute
    (``with_public_url``)."""
    event_type = _TYPE_OF_KIND.get(kind)
    if event_type is None:
        return 0
    row = job if isinstance(job, Job) else db.get(Job, job)
    if row is None:
        return 0
    repository = WebhookRepository(db)
    endpoints = [e for e in repository.endpoints(row.team_id) if event_type in e.events and e.disabled_at is None]
    if not endpoints:
        return 0
    body = event_body(event_type, job_event_data(row, kind, payload))
    for endpoint in endpoints:
        repository.add_delivery(new_delivery(endpoint, event_type, body, row.id))
    return len(endpoints)


def new_delivery(endpoint: WebhookEndpoint, event_type: str, body: str, job_id: str | None) -> WebhookDelivery:
    return WebhookDelivery(
        id=new_message_id(), endpoint_id=endpoint.id, job_id=job_id, event_type=event_type, body=body
    )


# -- the guard against private-network targets (SSRF) --


class WebhookTargetError(ValueError):
    """A webhook URL that may not be used; the message says why and how to fix it."""


@dataclass(frozen=True)
class TargetPolicy:
    """Which addresses a webhook may reach: public ones, and private ones only when the operator
    allows them (``WEBHOOK_ALLOW_PRIVATE``, or the networks in ``WEBHOOK_ALLOWED_NETWORKS``)."""

    allow_private: bool = False
    allowed_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def from_settings(cls, allow_private: bool, allowed_networks: str) -> TargetPolicy:
        return cls(allow_private, parse_networks(allowed_networks))

    def permits(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        if self.allow_private or any(address in network for network in self.allowed_networks):
            return True
        inside = embedded_ipv4(address)
        if inside is not None and not self.permits(inside):
            return False  # a NAT64, 6to4, Teredo or IPv4-compatible form of a private IPv4 address
        return address.is_global and not address.is_multicast


# IPv6 prefixes whose addresses carry an IPv4 address in their last 32 bits, which a translator
# (NAT64: RFC 6052, RFC 8215) or the host itself (IPv4-compatible, ::/96) may reach
_IPV4_IN_LAST_32_BITS = tuple(ipaddress.IPv6Network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48", "::/96"))


def embedded_ipv4(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (IPv4-mapped, NAT64, 6to4, Teredo server,
    IPv4-compatible); None for an IPv4 address or one that carries none."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None or address.sixtofour is not None:
        return address.ipv4_mapped or address.sixtofour
    if address.teredo is not None:
        return address.teredo[0]
    if any(address in network for network in _IPV4_IN_LAST_32_BITS):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def parse_networks(text: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``WEBHOOK_ALLOWED_NETWORKS``: comma-separated addresses or CIDR blocks."""
    try:
        return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ValueError(f"WEBHOOK_ALLOWED_NETWORKS: {exc} (give addresses or CIDR blocks, e.g. 10.1.0.0/16)") from exc


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect (every address its host resolved to was allowed)."""

    scheme: str
    host: str
    port: int
    path: str
    addresses: tuple[str, ...]


def check_url_shape(url: str) -> tuple[str, str, int, str]:
    """The scheme, host, port and path of a webhook URL, or ``WebhookTargetError``."""
    if len(url) > 2000:
        raise WebhookTargetError("The webhook URL is longer than 2,000 characters.")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookTargetError("A webhook URL starts with https:// (or http://) and names a host.")
    if parts.username or parts.password:
        raise WebhookTargetError("A webhook URL may not carry a user name or password; use the signature instead.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise WebhookTargetError(f"The webhook URL's port is not valid ({exc}).") from exc
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port, path


def check_target(url: str, policy: TargetPolicy) -> Target:
    """Resolve ``url``'s host and check every address it has against ``policy``; a private,
    loopback, link-local or metadata address refuses the whole URL."""
    scheme, host, port, path = check_url_shape(url)
    addresses = resolve(host, port)
    for address in addresses:
        if not policy.permits(ipaddress.ip_address(address)):
            raise WebhookTargetError(
                f"The webhook host {host} resolves to {address}, a private, loopback, link-local or "
                "metadata address, which this server does not call. Use a public address, or ask the "
                "operator to allow it (WEBHOOK_ALLOW_PRIVATE=1 or WEBHOOK_ALLOWED_NETWORKS)."
            )
    return Target(scheme, host, port, path, addresses)


def resolve(host: str, port: int) -> tuple[str, ...]:
    """Every address ``host`` resolves to (IPv4-mapped IPv6 addresses as their IPv4 address)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise WebhookTargetError(f"The webhook host {host} cannot be resolved; check the URL.") from exc
    found: list[str] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if str(address) not in found:
            found.append(str(address))
    if not found:
        raise WebhookTargetError(f"The webhook host {host} has no address; check the URL.")
    return tuple(found)


def check_events(events: Sequence[str]) -> list[str]:
    """The subscribed event types, each known, in a stable order; or ``WebhookTargetError``."""
    unknown = sorted(set(events) - EVENT_TYPES.keys())
    if unknown or not events:
        raise WebhookTargetError(
            f"Unknown webhook events {unknown}; choose one or more of {', '.join(EVENT_TYPES)}."
            if unknown
            else f"Name at least one event: {', '.join(EVENT_TYPES)}."
        )
    return [name for name in EVENT_TYPES if name in events]

"""The workers' webhook duty: one thread per worker process (each Celery worker, the embedded
server's runner) that, every ``WEBHOOK_POLL_S``, takes the due deliveries of the outbox
(``persistence.repositories.webhooks``) one at a time and sends each, signed the Standard Webhooks
way with its endpoint's secret.

* At-least-once, one ``webhook-id``: a delivery is claimed with a lease; a worker killed while
  sending leaves it to be taken again, with the same id and body, once the lease runs out.
* A 2xx answer delivers it. Anything else (another status, no answer, a refused target) is tried
  again after ``WEBHOOK_BACKOFF_S`` x 2^(attempt - 1) (at most ``MAX_PAUSE_S`` apart) until the
  event is ``WEBHOOK_MAX_AGE_S`` old (a day); then it fails for good. The log keeps the attempts,
  the last status code and the last error, for ``WEBHOOK_LOG_KEEP_S`` (30 days) after it ended.
* The target is checked again before every attempt (``persistence.webhooks.check_target``: a name
  that now resolves to a private address is refused) and the connection goes to the address
  that was checked, so a DNS answer changed in between cannot redirect it. Redirects are not
  followed.
* A ``410 Gone`` answer disables the endpoint (Standard Webhooks: the receiver asks for no more):
  the delivery fails, its endpoint's pending deliveries end ``dropped``, nothing more is queued
  for it (``disabled_at``, ``disabled_reason`` in the API and on the page).
* A job deleted by its team takes its deliveries not yet sent with it: they end ``dropped`` (the
  event's links would answer 404), logged as such."""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import ssl
import threading
import time
from datetime import datetime, timedelta

from persistence.db import Database
from persistence.models import utcnow
from persistence.repositories.webhooks import GONE, AttemptResult, Claimed, WebhookRepository
from persistence.webhooks import Target, TargetPolicy, WebhookTargetError, check_target, signed_headers, with_public_url
from worker.settings import WorkerSettings

log = logging.getLogger("onnx_reducer.worker")
MAX_PAUSE_S = 2 * 3600.0
BATCH = 20
LEASE_MARGIN_S = 30.0  # a delivery's lease: the receiver's timeout and this
USER_AGENT = "onnx-reducer-webhooks/1"
PRUNE_INTERVAL_S = 3600.0
GONE_REASON = "the receiver answered 410 Gone: register the URL again to send to it"


def retry_at(settings: WorkerSettings, claimed: Claimed, now: datetime) -> datetime | None:
    """When ``claimed`` is tried again after a failed attempt (the last time when the event is
    ``WEBHOOK_MAX_AGE_S`` old); None once it is out of time."""
    pause = min(settings.webhook_backoff_s * 2 ** (claimed.attempt - 1), MAX_PAUSE_S)
    deadline = claimed.created_at + timedelta(seconds=settings.webhook_max_age_s)
    return min(now + timedelta(seconds=pause), deadline) if now < deadline else None


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to a checked address, the certificate verified for the URL's host name."""

    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout, context=ssl.create_default_context())
        self._address = target.addresses[0]

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self._address = target.addresses[0]

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


def post(target: Target, headers: dict[str, str], body: str, timeout: float) -> int:
    """POST ``body`` to ``target`` (its first checked address); the answer's status code.
    ``timeout`` bounds the whole exchange, not only each read: a receiver that trickles its answer
    a byte at a time is cut off then (``TimeoutError``), so it cannot hold this worker's deliveries."""
    kind = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    connection = kind(target, timeout)
    cut = threading.Event()
    watchdog = threading.Timer(timeout, _cut_off, (connection, cut))
    watchdog.start()
    try:
        connection.request("POST", target.path, body=body.encode(), headers={**headers, "user-agent": USER_AGENT})
        response = connection.getresponse()
        response.read(64 * 1024)
    except (OSError, http.client.HTTPException) as exc:
        if not cut.is_set():
            raise
        raise _too_slow(timeout) from exc  # what the cut made of the read (a reset, a short answer)
    finally:
        watchdog.cancel()
        connection.close()
    if cut.is_set():
        raise _too_slow(timeout)
    return response.status


def _too_slow(timeout: float) -> TimeoutError:
    return TimeoutError(f"the receiver did not answer in {timeout:g} s")


def _cut_off(connection: http.client.HTTPConnection, cut: threading.Event) -> None:
    """The watchdog of ``post``: end the exchange where it is (the blocked read returns)."""
    cut.set()
    if connection.sock is not None:
        with contextlib.suppress(OSError):
            connection.sock.shutdown(socket.SHUT_RDWR)


def attempt(claimed: Claimed, policy: TargetPolicy, public_url: str, timeout: float) -> AttemptResult:
    """One attempt to deliver ``claimed``: its target checked, its body signed now and sent."""
    try:
        target = check_target(claimed.url, policy)
    except WebhookTargetError as exc:
        return AttemptResult(None, str(exc))
    body = with_public_url(claimed.body, public_url)
    headers = signed_headers(claimed.secret, claimed.id, int(time.time()), body)
    try:
        status = post(target, headers, body, timeout)
    except (OSError, http.client.HTTPException) as exc:
        return AttemptResult(None, f"no answer from {target.host}: {type(exc).__name__}: {exc}"[:500])
    if 200 <= status < 300:
        return AttemptResult(status, None)
    return AttemptResult(status, f"the receiver answered {status}")


class WebhookDelivery:
    """The duty's thread (module doc); ``run_once`` is one round, for tests and the thread."""

    def __init__(self, db: Database, settings: WorkerSettings) -> None:
        self.db, self.settings = db, settings
        self.policy = TargetPolicy.from_settings(settings.webhook_allow_private, settings.webhook_allowed_networks)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="webhook-delivery", daemon=True)
        self._next_prune = 0.0

    def start(self) -> WebhookDelivery:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                sent = self.run_once()
            except Exception as exc:  # noqa: BLE001 - the database is away: the next round retries
                if not failing:
                    log.warning("webhook deliveries paused (%s: %s); retrying", type(exc).__name__, exc)
                failing, sent = True, 0
            else:
                failing = False
            if not sent:
                self._stop.wait(self.settings.webhook_poll_s)

    def run_once(self) -> int:
        """Deliver what is due now (at most ``BATCH``); how many attempts were made. Now and then
        the log forgets the deliveries that ended more than ``WEBHOOK_LOG_KEEP_S`` ago."""
        with self.db.session() as session:
            webhooks = WebhookRepository(session)
            if time.monotonic() >= self._next_prune:
                webhooks.prune(utcnow() - timedelta(seconds=self.settings.webhook_log_keep_s))
                self._next_prune = time.monotonic() + PRUNE_INTERVAL_S
            dropped = webhooks.drop_for_deleted_jobs()
            due = webhooks.due(BATCH)
        for delivery_id, job_id in dropped:
            log.info("webhook %s dropped: job %s was deleted before it was sent", delivery_id, job_id)
        made = 0
        for delivery_id in due:
            if self._stop.is_set():
                break
            made += self._deliver(delivery_id)
        return made

    def _deliver(self, delivery_id: str) -> int:
        lease_s = self.settings.webhook_timeout_s + LEASE_MARGIN_S
        with self.db.session() as session:
            claimed = WebhookRepository(session).claim(delivery_id, lease_s)
        if claimed is None:
            return 0  # another worker took it
        result = attempt(claimed, self.policy, self.settings.public_url, self.settings.webhook_timeout_s)
        again = None if result.ok else retry_at(self.settings, claimed, utcnow())
        gone = result.status_code == GONE
        with self.db.session() as session:
            repository = WebhookRepository(session)
            recorded = repository.record_attempt(claimed, result, None if gone else again)
            dropped = repository.disable_endpoint_of(claimed, GONE_REASON) if gone and recorded else []
        if gone:
            log.warning(
                "webhook %s: the receiver answered 410 Gone; its endpoint is disabled (%d pending dropped)",
                claimed.id,
                len(dropped),
            )
        else:
            _log_attempt(claimed, result, again)
        return 1


def _log_attempt(claimed: Claimed, result: AttemptResult, again: datetime | None) -> None:
    if result.ok:
        log.info("webhook %s delivered (attempt %d, %s)", claimed.id, claimed.attempt, result.status_code)
    elif again is not None:
        log.info("webhook %s attempt %d failed (%s); again at %s", claimed.id, claimed.attempt, result.error, again)
    else:
        log.warning("webhook %s failed for good after %d attempts (%s)", claimed.id, claimed.attempt, result.error)

"""Webhooks (issue 29): endpoints registered over the API, deliveries signed the Standard Webhooks
way (verified here with the ``standardwebhooks`` reference library), delivered by the workers (the
embedded server's and the Celery farm's) to a real HTTP receiver on 127.0.0.1, retried with the
same ``webhook-id``, logged per endpoint; private-network targets refused unless the operator
allows them."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from standardwebhooks.webhooks import Webhook

from examples.build_example_model import build_example_model
from persistence.db import Database
from persistence.models import WebhookEndpoint, utcnow
from persistence.repositories import TeamRepository
from persistence.repositories.webhooks import Claimed, WebhookRepository
from persistence.webhooks import (
    TEST_EVENT,
    Target,
    TargetPolicy,
    WebhookTargetError,
    check_target,
    event_body,
    new_delivery,
    new_secret,
    sign,
)
from tests.service.conftest import Processes, client_for, start_api
from tests.service.embedded import embedded_server
from tests.service.helpers import submit, wait_job
from tests.service.web_harness import embedded_service
from worker.settings import WorkerSettings
from worker.webhooks import WebhookDelivery, post, retry_at

EXAMPLE = build_example_model().SerializeToString()
FAST = {"WEBHOOK_ALLOW_PRIVATE": "1", "WEBHOOK_POLL_S": "0.2", "WEBHOOK_BACKOFF_S": "0.2"}
WAIT_S = 120.0


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 (a thread) that records each POST and answers the statuses of
    ``script`` in turn, then 200."""

    script: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    url: str = ""

    def wait_for(self, count: int, timeout: float = WAIT_S) -> list[Received]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.received) >= count, timeout), self.received
            return list(self.received)

    def handle(self, headers: dict[str, str], body: bytes) -> int:
        with self.changed:
            self.received.append(Received(headers, body))
            self.changed.notify_all()
            return self.script.pop(0) if self.script else 200


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            status = state.handle({k.lower(): v for k, v in self.headers.items()}, body)
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/reducer"
    yield state
    server.shutdown()
    server.server_close()
    thread.join(10)


def verified(secret: str, received: Received) -> dict[str, Any]:
    """The delivery's event, its signature checked by the Standard Webhooks reference library."""
    event: dict[str, Any] = Webhook(secret).verify(received.body, received.headers)
    return event


def register(client: httpx.Client, url: str, events: list[str] | None = None) -> dict[str, Any]:
    response = client.post("/v1/webhooks", json={"url": url} | ({"events": events} if events else {}))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def wait_logged(
    client: httpx.Client,
    webhook_id: str,
    status: str,
    also: Callable[[dict[str, Any]], bool] = lambda delivery: True,
    timeout: float = WAIT_S,
) -> list[dict[str, Any]]:
    """The endpoint's log once its newest delivery has ``status`` (and ``also`` holds for it: the
    receiver already saw it; the worker writes the outcome right after the answer)."""
    deadline = time.monotonic() + timeout
    while True:
        items: list[dict[str, Any]] = client.get(f"/v1/webhooks/{webhook_id}/deliveries").json()["items"]
        if items and items[0]["status"] == status and also(items[0]):
            return items
        assert time.monotonic() < deadline, items
        time.sleep(0.1)


# -- the embedded server (in-process workers) --


@pytest.fixture
def fast_webhooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator allows private targets (the receiver is on 127.0.0.1) and retries fast."""
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("fast_webhooks")
def test_a_job_end_delivers_one_signed_event(tmp_path: Path, receiver: Receiver) -> None:
    with embedded_service(tmp_path) as service, client_for(service.url, service.token) as client:
        created = register(client, receiver.url, ["job.succeeded", "job.failed"])
        assert created["secret"].startswith("whsec_") and len(base64.b64decode(created["secret"][6:])) >= 24
        listed = client.get("/v1/webhooks").json()["items"]
        assert [item["id"] for item in listed] == [created["id"]] and "secret" not in listed[0]
        job_id = submit(client, EXAMPLE).json()["id"]
        assert wait_job(client, job_id)["status"] == "succeeded"
        (delivery,) = receiver.wait_for(1)
        log = wait_logged(client, created["id"], "succeeded")
    event = verified(created["secret"], delivery)
    assert event["type"] == "job.succeeded"
    data = event["data"]
    assert data["job_id"] == job_id and data["outcome"] == "succeeded"
    assert data["min_bad_nodes"] and data["verified"] is not None
    assert data["links"]["self"] == f"/v1/jobs/{job_id}" and data["links"]["min_bad"].endswith("/artifacts/min-bad")
    assert delivery.headers["webhook-id"].startswith("msg_")
    assert [(d["id"], d["event_type"], d["attempts"]) for d in log] == [
        (delivery.headers["webhook-id"], "job.succeeded", 1)
    ]
    assert len(receiver.received) == 1  # the job's other events (queued, iterations) are not sent


@pytest.mark.usefixtures("fast_webhooks")
def test_a_failing_receiver_gets_the_same_id_until_it_answers(tmp_path: Path, receiver: Receiver) -> None:
    receiver.script = [500, 500]
    with embedded_service(tmp_path) as service, client_for(service.url, service.token) as client:
        created = register(client, receiver.url)
        queued = client.post(f"/v1/webhooks/{created['id']}/test")
        assert queued.status_code == 202 and queued.json()["status"] == "pending"
        deliveries = receiver.wait_for(3)
        log = wait_logged(client, created["id"], "succeeded")
    assert {d.headers["webhook-id"] for d in deliveries} == {queued.json()["id"]}
    assert len({d.body for d in deliveries}) == 1  # the same event each time, signed each time
    assert [verified(created["secret"], d)["type"] for d in deliveries] == ["webhook.test"] * 3
    (entry,) = log
    assert entry["attempts"] == 3 and entry["last_status_code"] == 200 and entry["last_error"] is None


@pytest.mark.usefixtures("fast_webhooks")
def test_the_log_shows_a_failing_receiver_and_when_it_is_tried_again(tmp_path: Path, receiver: Receiver) -> None:
    receiver.script = [503] * 100
    with embedded_service(tmp_path) as service, client_for(service.url, service.token) as client:
        created = register(client, receiver.url)
        client.post(f"/v1/webhooks/{created['id']}/test")
        receiver.wait_for(2)
        (entry,) = wait_logged(client, created["id"], "pending", lambda d: d["last_status_code"] == 503)
        metrics = httpx.get(f"{service.url}/metrics").text
        gone = client.delete(f"/v1/webhooks/{created['id']}")
        after = client.get(f"/v1/webhooks/{created['id']}/deliveries")
    assert entry["attempts"] >= 1 and entry["last_error"] == "the receiver answered 503"
    assert entry["next_attempt_at"] is not None and entry["delivered_at"] is None
    delivering = 'onnx_reducer_webhook_deliveries{status="delivering"} 1.0' in metrics  # caught mid-attempt
    assert delivering or 'onnx_reducer_webhook_deliveries{status="pending"} 1.0' in metrics
    assert gone.status_code == 204 and after.status_code == 404


@pytest.mark.slow
def test_onnx_reducer_serve_delivers_from_its_job_process(tmp_path: Path, receiver: Receiver) -> None:
    """``onnx-reducer serve`` (``make run``): the job ends in its job process, the server's runner
    delivers."""
    with embedded_server(tmp_path, FAST) as server, client_for(server.url, server.token) as client:
        created = register(client, receiver.url, ["job.succeeded"])
        job_id = submit(client, EXAMPLE).json()["id"]
        (delivery,) = receiver.wait_for(1)
        wait_logged(client, created["id"], "succeeded")
    event = verified(created["secret"], delivery)
    assert event["type"] == "job.succeeded" and event["data"]["job_id"] == job_id


# -- the Celery farm --


@pytest.mark.slow
def test_the_farm_delivers_a_failed_job_and_retries(
    processes: Processes, tokens: dict[str, str], receiver: Receiver
) -> None:
    receiver.script = [500, 500]
    processes.env.update(FAST)
    api_url = start_api(processes)
    processes.worker()
    with client_for(api_url, tokens["team-a"]) as client:
        created = register(client, receiver.url, ["job.failed"])
        job_id = submit(client, EXAMPLE, "kind: op-present\nops: [Conv]\n").json()["id"]  # the original passes
        assert wait_job(client, job_id)["status"] == "failed"
        deliveries = receiver.wait_for(3)
        (entry,) = wait_logged(client, created["id"], "succeeded")
    events = [verified(created["secret"], d) for d in deliveries]
    assert {d.headers["webhook-id"] for d in deliveries} == {entry["id"]}
    assert [e["type"] for e in events] == ["job.failed"] * 3
    assert events[0]["data"]["error"]["code"] == "original-did-not-fail"
    assert entry["attempts"] == 3 and entry["job_id"] == job_id


def test_an_interactive_job_question_is_delivered(
    fast_webhooks: None, quiet_client: httpx.Client, database: Database, receiver: Receiver
) -> None:
    """``job.needs-answer``: each question of an interactive job (the api records it) is queued,
    and a worker's delivery duty sends it; an event the endpoint did not ask for is not sent."""
    created = register(quiet_client, receiver.url, ["job.needs-answer"])
    job = quiet_client.get(submit(quiet_client, EXAMPLE, "kind: interactive\n").headers["Location"]).json()
    assert quiet_client.post(f"/v1/jobs/{job['id']}/cancel").status_code in (200, 202)
    worker = WebhookDelivery(database, WorkerSettings(database_url=database.url, webhook_allow_private=True))
    assert worker.run_once() == 1  # the question; the cancel is not subscribed
    (delivery,) = receiver.wait_for(1)
    event = verified(created["secret"], delivery)
    assert event["type"] == "job.needs-answer" and event["data"]["job_id"] == job["id"]
    assert event["data"]["question"]["iteration"] == job["awaiting_verdict"]["iteration"]
    assert event["data"]["links"]["verdict"] == f"/v1/jobs/{job['id']}/verdict"


# -- the guard against private targets --


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://[::1]/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://[::ffff:127.0.0.1]/hook",
    ],
)
def test_private_targets_are_refused_by_default(quiet_client: httpx.Client, url: str) -> None:
    refused = quiet_client.post("/v1/webhooks", json={"url": url})
    assert refused.status_code == 422, refused.text
    assert "WEBHOOK_ALLOW_PRIVATE" in refused.json()["detail"]
    assert quiet_client.get("/v1/webhooks").json()["items"] == []


def test_bad_urls_and_events_say_how_to_fix_them(quiet_client: httpx.Client) -> None:
    scheme = quiet_client.post("/v1/webhooks", json={"url": "ftp://example.com/x"})
    events = quiet_client.post("/v1/webhooks", json={"url": "https://example.com/x", "events": ["job.done"]})
    assert scheme.status_code == 422 and "https://" in scheme.json()["detail"]
    assert events.status_code == 422 and "job.succeeded" in events.json()["detail"]


def test_a_target_is_checked_again_at_delivery(database: Database) -> None:
    """Registered while private targets were allowed; a worker without the allowance refuses to
    call it, logs why and tries again later."""
    with database.session() as session:
        team = TeamRepository(session).get_or_create("team-a")
        endpoint_id = _endpoint(WebhookRepository(session), team.id, "http://127.0.0.1:9/hook")
    worker = WebhookDelivery(database, WorkerSettings(database_url=database.url, webhook_backoff_s=60))
    _queue_test_event(database, endpoint_id)
    assert worker.run_once() == 1
    with database.session() as session:
        (entry,) = WebhookRepository(session).deliveries(endpoint_id)
        assert entry.status == "pending" and entry.attempts == 1 and entry.last_status_code is None
        assert "WEBHOOK_ALLOW_PRIVATE" in (entry.last_error or "")
        assert entry.next_attempt_at > utcnow() + timedelta(seconds=50)
    assert worker.run_once() == 0  # not due again yet


def test_a_delivery_held_by_a_killed_worker_is_sent_again_with_its_id(database: Database, receiver: Receiver) -> None:
    with database.session() as session:
        team = TeamRepository(session).get_or_create("team-a")
        endpoint_id = _endpoint(WebhookRepository(session), team.id, receiver.url)
    _queue_test_event(database, endpoint_id)
    with database.session() as session:
        (delivery_id,) = WebhookRepository(session).due(10)
        assert WebhookRepository(session).claim(delivery_id, lease_s=0.0) is not None  # then the worker died
    worker = WebhookDelivery(database, WorkerSettings(database_url=database.url, webhook_allow_private=True))
    assert worker.run_once() == 1
    (delivery,) = receiver.wait_for(1)
    with database.session() as session:
        (entry,) = WebhookRepository(session).deliveries(endpoint_id)
    assert delivery.headers["webhook-id"] == delivery_id
    assert entry.status == "succeeded" and entry.attempts == 2


def test_another_team_deleting_an_endpoint_removes_nothing(database: Database) -> None:
    """The repository itself keeps another team's endpoint and its log (not only the request's
    rollback when the api answers 404)."""
    with database.session() as session:
        team = TeamRepository(session).get_or_create("team-a")
        other = TeamRepository(session).get_or_create("team-b")
        endpoint_id = _endpoint(WebhookRepository(session), team.id, "https://example.com/hook")
    _queue_test_event(database, endpoint_id)
    with database.session() as session:
        webhooks = WebhookRepository(session)
        assert not webhooks.delete_endpoint(other.id, endpoint_id)
        assert len(webhooks.deliveries(endpoint_id)) == 1
        assert webhooks.delete_endpoint(team.id, endpoint_id)
        assert webhooks.deliveries(endpoint_id) == [] and webhooks.endpoint(team.id, endpoint_id) is None


def test_the_log_forgets_ended_deliveries_after_a_while(database: Database, receiver: Receiver) -> None:
    with database.session() as session:
        team = TeamRepository(session).get_or_create("team-a")
        endpoint_id = _endpoint(WebhookRepository(session), team.id, receiver.url)
    settings = WorkerSettings(database_url=database.url, webhook_allow_private=True, webhook_log_keep_s=3600)
    _queue_test_event(database, endpoint_id)
    assert WebhookDelivery(database, settings).run_once() == 1
    _queue_test_event(database, endpoint_id)  # still to be delivered, however old
    with database.session() as session:
        for row in WebhookRepository(session).deliveries(endpoint_id):
            row.created_at = utcnow() - timedelta(hours=2)
    receiver.script = [500]
    assert WebhookDelivery(database, settings).run_once() == 1  # a new duty prunes at its first round
    with database.session() as session:
        (kept,) = WebhookRepository(session).deliveries(endpoint_id)
    assert kept.status == "pending" and kept.attempts == 1


def test_another_teams_webhook_is_not_found(quiet_api: str, tokens: dict[str, str]) -> None:
    with client_for(quiet_api, tokens["team-a"]) as a, client_for(quiet_api, tokens["team-b"]) as b:
        created = a.post("/v1/webhooks", json={"url": "https://93.184.215.14/hook"})
        assert created.status_code == 201, created.text
        hook = created.json()["id"]
        assert b.get(f"/v1/webhooks/{hook}").status_code == 404
        assert b.get(f"/v1/webhooks/{hook}/deliveries").status_code == 404
        assert b.post(f"/v1/webhooks/{hook}/test").status_code == 404
        assert b.delete(f"/v1/webhooks/{hook}").status_code == 404
        assert b.get("/v1/webhooks").json()["items"] == []
        assert a.get(f"/v1/webhooks/{hook}").json()["secret_hint"].startswith("whsec_")


def test_https_goes_to_the_checked_address_and_verifies_the_hosts_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection goes to the address the guard checked (the name itself resolves nowhere),
    with the URL's host name for SNI and the certificate check: another name is refused."""
    cert, key = _self_signed(tmp_path, "webhooks.test")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts this certificate alone
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            self.send_response(receiver.handle({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        answered = post(Target("https", "webhooks.test", port, "/hook", ("127.0.0.1",)), {}, "{}", 10)
        with pytest.raises(ssl.SSLCertVerificationError):
            post(Target("https", "other.test", port, "/hook", ("127.0.0.1",)), {}, "{}", 10)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert answered == 200
    (seen,) = receiver.received
    assert seen.headers["host"].startswith("webhooks.test") and seen.body == b"{}"


def test_a_receiver_that_trickles_its_answer_is_cut_off_at_the_timeout() -> None:
    """The timeout bounds the whole exchange: a receiver sending its status line a byte at a time
    (each byte well inside the per-read timeout, for far longer than the timeout) holds the
    delivery no longer than the timeout."""
    listener = socket.create_server(("127.0.0.1", 0))
    sent: list[int] = []

    def trickle() -> None:
        peer, _ = listener.accept()
        with peer:
            peer.recv(65536)  # the request
            with contextlib.suppress(OSError):  # the worker cut the connection
                peer.sendall(b"HTTP/1.1 200 ")
                for _ in range(300):
                    peer.sendall(b"O")
                    sent.append(1)
                    time.sleep(0.1)
                peer.sendall(b"K\r\ncontent-length: 0\r\n\r\n")

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        target = Target("http", "127.0.0.1", listener.getsockname()[1], "/hook", ("127.0.0.1",))
        with pytest.raises(TimeoutError, match="did not answer in 1 s"):
            post(target, {}, "{}", 1.0)
        thread.join(60)
    finally:
        listener.close()
    assert not thread.is_alive() and len(sent) < 300  # the receiver saw the connection end early


def _self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_openapi_documents_the_webhook_routes_problems(quiet_api: str) -> None:
    paths = httpx.get(f"{quiet_api}/openapi.json").json()["paths"]

    def problems(method: str, path: str) -> set[str]:
        answers = paths[path][method]["responses"].items()
        return {code for code, answer in answers if "application/problem+json" in answer.get("content", {})}

    assert problems("post", "/v1/webhooks") == {"401", "409", "422", "503"}
    assert problems("delete", "/v1/webhooks/{webhook_id}") == {"401", "404", "422", "503"}
    assert problems("post", "/v1/webhooks/{webhook_id}/test") == {"401", "404", "422", "503"}


# -- the parts without services --


def test_the_signature_is_the_standard_webhooks_one() -> None:
    secret = new_secret()
    body = json.dumps({"type": "job.succeeded", "data": {"job_id": "x"}})
    timestamp = int(utcnow().timestamp())
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(timestamp)}
    headers["webhook-signature"] = sign(secret, "msg_1", timestamp, body)
    assert Webhook(secret).verify(body, headers) == json.loads(body)
    with pytest.raises(Exception, match="signature"):
        Webhook(new_secret()).verify(body, headers)


def test_the_operator_allows_named_networks_only() -> None:
    policy = TargetPolicy.from_settings(False, "127.0.0.0/8")
    assert check_target("http://127.0.0.1:8080/x", policy).addresses == ("127.0.0.1",)
    with pytest.raises(WebhookTargetError):
        check_target("http://10.0.0.1/x", policy)
    assert check_target("http://10.0.0.1/x", TargetPolicy(allow_private=True)).port == 80


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/hook",  # 127.0.0.1 as one decimal number
        "http://0177.0.0.1/hook",  # octal
        "http://0x7f.1/hook",  # hexadecimal, two parts
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",  # NAT64 of 169.254.169.254
        "http://[64:ff9b:1::a00:1]/hook",  # local-use NAT64 of 10.0.0.1
        "http://[2002:c0a8:1::]/hook",  # 6to4 of 192.168.0.1
        "http://[::7f00:1]/hook",  # IPv4-compatible 127.0.0.1
        "http://[fd00:ec2::254]/hook",  # a cloud's IPv6 metadata address
        "http://[::]/hook",
    ],
)
def test_other_spellings_of_private_addresses_are_refused(url: str) -> None:
    with pytest.raises(WebhookTargetError, match="WEBHOOK_ALLOW_PRIVATE"):
        check_target(url, TargetPolicy())


def test_ipv6_forms_of_public_addresses_are_allowed() -> None:
    assert check_target("http://[64:ff9b::808:808]/hook", TargetPolicy()).addresses == ("64:ff9b::808:808",)
    assert check_target("http://[2002:808:808::1]/hook", TargetPolicy()).port == 80


def test_retries_back_off_exponentially_for_a_day() -> None:
    settings = WorkerSettings(webhook_backoff_s=5, webhook_max_age_s=24 * 3600)
    start = utcnow()
    pauses: list[float] = []
    for attempt in range(1, 40):
        claimed = Claimed("msg_x", attempt, "", "", "", start)
        now = start + timedelta(seconds=sum(pauses))
        again = retry_at(settings, claimed, now)
        if again is None:
            break
        pauses.append((again - now).total_seconds())
    assert pauses[:4] == [5, 10, 20, 40] and max(pauses) == 2 * 3600
    assert sum(pauses) == 24 * 3600  # the last attempt when the event is a day old, then no more


def _endpoint(webhooks: WebhookRepository, team_id: str, url: str) -> str:
    endpoint = webhooks.add_endpoint(
        WebhookEndpoint(team_id=team_id, url=url, events=["job.succeeded"], secret=new_secret())
    )
    return endpoint.id


def _queue_test_event(database: Database, endpoint_id: str) -> None:
    with database.session() as session:
        webhooks = WebhookRepository(session)
        endpoint = session.get(WebhookEndpoint, endpoint_id)
        assert endpoint is not None
        webhooks.add_delivery(new_delivery(endpoint, TEST_EVENT, event_body(TEST_EVENT, {}), None))


def test_a_deleted_jobs_pending_delivery_is_dropped_not_sent(
    database: Database, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A job's event still pending when its team deletes the job (its rows gone) is not sent (its
    links would answer 404): it ends 'dropped', saying why in the log and the worker's log; a test
    event (no job) beside it is still delivered."""
    with database.session() as session:
        team = TeamRepository(session).get_or_create("team-a")
        endpoint_id = _endpoint(WebhookRepository(session), team.id, receiver.url)
    with database.session() as session:
        endpoint = session.get(WebhookEndpoint, endpoint_id)
        assert endpoint is not None
        body = event_body("job.succeeded", {"job_id": "deleted0job0id", "status": "succeeded"})
        WebhookRepository(session).add_delivery(new_delivery(endpoint, "job.succeeded", body, "deleted0job0id"))
    _queue_test_event(database, endpoint_id)
    worker = WebhookDelivery(database, WorkerSettings(database_url=database.url, webhook_allow_private=True))
    with caplog.at_level("INFO", logger="onnx_reducer.worker"):
        assert worker.run_once() == 1  # the test event only
    (delivery,) = receiver.wait_for(1)
    assert json.loads(delivery.body)["type"] == TEST_EVENT
    with database.session() as session:
        entries = {row.event_type: row for row in WebhookRepository(session).deliveries(endpoint_id)}
    dropped = entries["job.succeeded"]
    assert dropped.status == "dropped" and dropped.attempts == 0, dropped
    assert "its job was deleted" in (dropped.last_error or "")
    assert entries[TEST_EVENT].status == "succeeded"
    assert "job deleted0job0id was deleted" in caplog.text
    assert len(receiver.received) == 1


def test_a_receiver_answering_410_gone_disables_its_endpoint(
    database: Database, receiver: Receiver, quiet_client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    """Standard Webhooks: 410 Gone means "send no more". The delivery fails at once (no retry), the
    endpoint is disabled (``disabled_at`` and why, in the API), its other pending deliveries end
    'dropped', a new job event queues nothing for it, and its test event is a 409 saying how to
    send to it again."""
    with database.session() as session:
        team = TeamRepository(session).get_or_create("team-a")
        endpoint_id = _endpoint(WebhookRepository(session), team.id, receiver.url)
    _queue_test_event(database, endpoint_id)
    receiver.script = [410]
    worker = WebhookDelivery(database, WorkerSettings(database_url=database.url, webhook_allow_private=True))
    with database.session() as session:
        (first,) = WebhookRepository(session).due(10)
    _queue_test_event(database, endpoint_id)  # due after the first: dropped by its 410
    with caplog.at_level("INFO", logger="onnx_reducer.worker"):
        assert worker.run_once() == 1
    assert len(receiver.wait_for(1)) == 1
    assert worker.run_once() == 0  # the second was dropped, not sent
    assert "410 Gone" in caplog.text
    with database.session() as session:
        entries = {row.id: row for row in WebhookRepository(session).deliveries(endpoint_id)}
    assert entries[first].status == "failed" and entries[first].last_status_code == 410, entries[first]
    (other,) = [row for key, row in entries.items() if key != first]
    assert other.status == "dropped" and "410 Gone" in (other.last_error or ""), other
    shown = quiet_client.get(f"/v1/webhooks/{endpoint_id}")
    assert shown.status_code == 200 and shown.json()["disabled_at"], shown.text
    assert "410 Gone" in shown.json()["disabled_reason"]
    test = quiet_client.post(f"/v1/webhooks/{endpoint_id}/test")
    assert test.status_code == 409 and "register the URL again" in test.json()["detail"], test.text


@pytest.mark.usefixtures("fast_webhooks")
def test_deleting_a_job_drops_its_event_still_waiting_for_a_retry(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: the job's 'job.succeeded' is refused once (503, next try in an hour); the team
    deletes the job (DELETE /v1/jobs/{id}); the worker drops the event instead of sending it
    (its links would answer 404), the log says why."""
    monkeypatch.setenv("WEBHOOK_BACKOFF_S", "3600")
    receiver.script = [503]
    with embedded_service(tmp_path) as service, client_for(service.url, service.token) as client:
        created = register(client, receiver.url, ["job.succeeded"])
        job_id = submit(client, EXAMPLE).json()["id"]
        assert wait_job(client, job_id)["status"] == "succeeded"
        receiver.wait_for(1)
        wait_logged(client, created["id"], "pending", lambda d: d["attempts"] == 1)
        assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
        (entry,) = wait_logged(client, created["id"], "dropped")
    assert entry["job_id"] == job_id and "its job was deleted" in entry["last_error"], entry
    assert entry["attempts"] == 1 and len(receiver.received) == 1

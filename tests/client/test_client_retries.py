"""Retries against real sockets: a small HTTP server that answers from a script (503 with
Retry-After, then the job), a port that accepts and hangs up, and a port nobody listens on. The
policy's sleep is recorded instead of slept, so the waits asked for can be checked exactly. The
same server records what ``submit`` sends (its options as form fields)."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from reducer_cli.main import run
from reducer_client import AuthError, ReducerClient, RetryPolicy, ServerUnreachableError
from tests.service.helpers import free_port

JOB_ID = "0123456789abcdef0123456789abcdef"
JOB = {"id": JOB_ID, "status": "running", "mode": "auto", "check_kind": "op-present", "progress": {}}


@dataclass
class Scripted:
    """Answers (status, headers, body) in order; the last one repeats."""

    answers: list[tuple[int, dict[str, str], object]]
    requests: list[tuple[str, str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)


def _handler(script: Scripted) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            script.requests.append((self.command, self.path))
            length = int(self.headers.get("content-length") or 0)
            script.bodies.append(self.rfile.read(length))
            status, headers, body = script.answers[min(len(script.requests), len(script.answers)) - 1]
            data = json.dumps(body).encode() if not isinstance(body, str) else body.encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def scripted() -> Iterator[tuple[Scripted, str]]:
    script = Scripted([])
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield script, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def recording_policy(attempts: int = 4) -> tuple[RetryPolicy, list[float]]:
    slept: list[float] = []
    return RetryPolicy(attempts=attempts, base_s=0.5, sleep=slept.append), slept


def test_503_is_retried_after_the_servers_retry_after(scripted: tuple[Scripted, str]) -> None:
    script, url = scripted
    busy = {"title": "Service Unavailable", "status": 503, "detail": "busy"}
    script.answers = [(503, {"Retry-After": "3"}, busy), (502, {}, "<html>gateway</html>"), (200, {}, JOB)]
    policy, slept = recording_policy()
    with ReducerClient(url, "t", retry=policy) as client:
        job = client.get_job(JOB_ID)
    assert (job.id, job.status) == (JOB_ID, "running")
    assert len(script.requests) == 3
    assert slept[0] == 3.0 and 0.5 <= slept[1] <= 0.5 * 2 * 1.25


def test_a_gateway_that_stays_down_ends_as_unreachable_after_the_attempts(scripted: tuple[Scripted, str]) -> None:
    script, url = scripted
    script.answers = [(504, {}, "timeout")]
    policy, slept = recording_policy(attempts=3)
    with ReducerClient(url, "t", retry=policy) as client, pytest.raises(ServerUnreachableError, match="504"):
        client.get_job(JOB_ID)
    assert len(script.requests) == 3 and len(slept) == 2


def test_a_job_retry_request_is_not_repeated_on_a_gateway_error(scripted: tuple[Scripted, str]) -> None:
    script, url = scripted
    script.answers = [(503, {}, "busy"), (202, {}, JOB)]
    policy, _ = recording_policy()
    with ReducerClient(url, "t", retry=policy) as client, pytest.raises(ServerUnreachableError):
        client.retry_job(JOB_ID)
    assert script.requests == [("POST", f"/v1/jobs/{JOB_ID}/retry")]


def test_a_refusal_carries_the_problem_document(scripted: tuple[Scripted, str]) -> None:
    script, url = scripted
    problem = {"type": "about:blank", "title": "Unauthorized", "status": 401, "detail": "This API token is not valid."}
    script.answers = [(401, {"Content-Type": "application/problem+json"}, problem)]
    with ReducerClient(url, "bad") as client, pytest.raises(AuthError) as caught:
        client.get_job(JOB_ID)
    assert (caught.value.problem.title, caught.value.problem.detail, caught.value.status) == (
        "Unauthorized",
        "This API token is not valid.",
        401,
    )
    assert len(script.requests) == 1


@pytest.fixture
def hangs_up() -> Iterator[tuple[str, list[int]]]:
    """A port that accepts each connection and closes it at once; counts the connections."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    listener.close()


def test_cli_gives_up_after_its_retries_with_exit_8(
    hangs_up: tuple[str, list[int]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, accepted = hangs_up
    assert run(["status", JOB_ID, "--server", url, "--token", "t", "--retries", "2"]) == 8
    assert len(accepted) == 3  # the first attempt and two retries
    assert "cannot be reached" in capsys.readouterr().err


def test_cli_with_nobody_listening_exits_8_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert run(["jobs", "--server", url, "--token", "t", "--retries", "1", "--json"]) == 8
    summary = json.loads(capsys.readouterr().out)
    assert summary["exit_code"] == 8 and summary["error"]["code"] == "server-unreachable"


def _form_fields(body: bytes) -> dict[str, str]:
    """The small text fields of a multipart body (the model part is left out)."""
    found = re.findall(rb'name="([a-z_]+)"\r\n\r\n([^\r]*)\r\n', body)
    return {name.decode(): value.decode() for name, value in found}


def _model_and_spec(folder: Path, spec_text: str) -> tuple[Path, Path]:
    """A model file (its bytes do not matter to the client) and a check spec with ``spec_text``."""
    model, spec = folder / "m.onnx", folder / "s.yaml"
    model.write_bytes(b"x")
    spec.write_text(spec_text)
    return model, spec


def test_submit_sends_confirm_flaky_only_when_asked(
    scripted: tuple[Scripted, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, url = scripted
    script.answers = [(202, {}, {"id": JOB_ID, "status": "queued"})]
    model, spec = _model_and_spec(tmp_path, "kind: op-present\nops: [Mul]\n")
    base = ["submit", str(model), "--check-spec", str(spec), "--server", url, "--token", "t"]
    assert run([*base, "--confirm-flaky"]) == 0
    assert run(base) == 0
    assert run([*base, "--no-confirm-flaky"]) == 0
    asked, plain, off = (_form_fields(body) for body in script.bodies)
    assert script.requests == [("POST", "/v1/jobs")] * 3
    assert asked["confirm_flaky"] == "true" and "pin_signature" not in asked
    assert off["confirm_flaky"] == "false"
    assert "confirm_flaky" not in plain and plain["check_spec"] == "kind: op-present\nops: [Mul]\n"
    with ReducerClient(url, "t") as client:
        client.submit(model, "kind: op-present\nops: [Mul]\n", confirm_flaky=False)
    assert _form_fields(script.bodies[-1])["confirm_flaky"] == "false"
    assert JOB_ID in capsys.readouterr().err


def test_submit_sends_the_source_job_and_what_to_bisect_only_when_given(
    scripted: tuple[Scripted, str], tmp_path: Path
) -> None:
    script, url = scripted
    script.answers = [(202, {}, {"id": JOB_ID, "status": "queued"})]
    model, spec = _model_and_spec(tmp_path, "kind: op-present\nops: [Gelu]\ntarget: {runtime: onnxruntime}\n")
    base = ["submit", str(model), "--check-spec", str(spec), "--server", url, "--token", "t", "--task", "bisect-passes"]
    assert run([*base, "--source-job", "abc123", "--on", "original"]) == 0
    assert run(base) == 0
    sourced, plain = (_form_fields(body) for body in script.bodies)
    assert (sourced["source_job_id"], sourced["on"], sourced["task"]) == ("abc123", "original", "bisect-passes")
    assert "source_job_id" not in plain and "on" not in plain

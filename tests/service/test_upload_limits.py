"""The upload's limits cover the whole body, not only the model part: many text fields, chunked or
with a Content-Length, answer 413 (too many parts: 400) as problem+json and store nothing; a
malformed multipart body answers 400; a client that disconnects mid-upload leaves nothing behind
and no server error."""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from tests.service.conftest import client_for
from tests.service.helpers import OP_PRESENT_MUL
from tests.service.test_bad_input import _stored

MAX_UPLOAD = 200_000
EXAMPLE = build_example_model().SerializeToString()
BOUNDARY = "orxboundary" + uuid.uuid4().hex


@pytest.fixture
def api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> str:
    settings = ApiSettings(database_url=db_url, data_dir=data_dir, max_upload_bytes=MAX_UPLOAD)
    return serve_app(create_app(settings, enqueue=lambda job_id, queue: None))


def _part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n"


def _body(fields: list[tuple[str, bytes]]) -> bytes:
    parts = [_part("model", EXAMPLE, "model.onnx"), _part("check_spec", OP_PRESENT_MUL.encode())]
    parts += [_part(name, value) for name, value in fields]
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


def _post(api: str, token: str, body: bytes, chunked: bool) -> httpx.Response:
    headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    content: bytes | Iterator[bytes] = body
    if chunked:  # a generator: httpx sends Transfer-Encoding: chunked, no Content-Length
        content = (body[i : i + 65536] for i in range(0, len(body), 65536))
    with client_for(api, token) as client:
        return client.post("/v1/jobs", content=content, headers=headers)


def _assert_problem(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert words.lower() in response.json()["detail"].lower()


def test_a_well_formed_body_of_this_shape_is_accepted(api: str, tokens: dict[str, str]) -> None:
    for chunked in (False, True):
        response = _post(api, tokens["team-a"], _body([("mode", b"bisect"), ("note", b"ignored")]), chunked)
        assert response.status_code == 202, response.text


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
def test_many_text_fields_count_against_the_total_limit(
    chunked: bool, api: str, tokens: dict[str, str], db_url: str, data_dir: Path
) -> None:
    """Each field stays under the per-field cap; together they are far over the upload limit."""
    fields = [(f"field{i}", b"x" * 200_000) for i in range(8)]
    response = _post(api, tokens["team-a"], _body(fields), chunked)
    _assert_problem(response, 413, "MAX_UPLOAD_BYTES")
    assert _stored(db_url, data_dir) == (0, [])


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
def test_too_many_parts_is_refused(
    chunked: bool, api: str, tokens: dict[str, str], db_url: str, data_dir: Path
) -> None:
    response = _post(api, tokens["team-a"], _body([(f"f{i}", b"1") for i in range(500)]), chunked)
    _assert_problem(response, 400, "parts")
    assert _stored(db_url, data_dir) == (0, [])


@pytest.mark.parametrize(
    "body",
    [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="check_spec"; x="{"y" * 9000}"\r\n\r\nz\r\n',
        f'--{BOUNDARY}\r\nContent-Dispo\x00sition: form-data; name="check_spec"\r\n\r\nz\r\n',
        f"--{BOUNDARY}\r\n" + "".join(f"X-H{i}: v\r\n" for i in range(20)) + "\r\nz\r\n",
    ],
    ids=["header-too-long", "bad-header-character", "too-many-headers"],
)
def test_a_malformed_body_is_400(body: str, api: str, tokens: dict[str, str], db_url: str, data_dir: Path) -> None:
    response = _post(api, tokens["team-a"], body.encode() + f"--{BOUNDARY}--\r\n".encode(), chunked=False)
    _assert_problem(response, 400, "multipart")
    assert _stored(db_url, data_dir) == (0, [])


def test_a_client_that_disconnects_mid_upload_leaves_nothing(
    api: str, tokens: dict[str, str], db_url: str, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = _body([])
    address = urlsplit(api)
    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: {address.netloc}\r\nAuthorization: Bearer {tokens['team-a']}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with caplog.at_level(logging.INFO):
        with socket.create_connection((address.hostname, address.port)) as sock:
            sock.sendall(head.encode() + body[: len(body) // 2])
            time.sleep(0.5)
        deadline = time.monotonic() + 60
        while "client disconnected" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.1)
    assert "client disconnected during an upload" in caplog.text
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert _stored(db_url, data_dir) == (0, [])
    with client_for(api, tokens["team-a"]) as client:
        assert client.get("/healthz").status_code == 200

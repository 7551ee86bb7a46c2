"""A database outage and token management, as a user and an operator meet them: one clear line
instead of a traceback, ``serve`` waiting for its database at start-up, 503 + Retry-After while the
database is away (a TCP proxy the test stops and starts stands between the api and PostgreSQL),
``token list``/``token revoke`` (a revoked token also ends its open event streams), and an
embedded home that is the same from any working directory."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from fastapi import FastAPI

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from tests.service.conftest import BIN, client_for
from tests.service.helpers import free_port, read_sse, start, submit, wait_http
from tests.service.tcp_proxy import TcpProxy

EXAMPLE = build_example_model().SerializeToString()


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["onnx-reducer", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def _env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DATA_DIR")}
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env.update(values)
    return env


@pytest.fixture
def proxy(db_url: str) -> Iterator[tuple[TcpProxy, str]]:
    """A proxy in front of the test's PostgreSQL, and the database URL through it."""
    parts = urlsplit(db_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    proxy.start()
    host = f"127.0.0.1:{proxy.port}"
    netloc = f"{parts.username}@{host}" if parts.username else host
    yield proxy, urlunsplit(parts._replace(netloc=netloc))
    proxy.stop()


def test_commands_say_in_one_line_that_the_database_is_unreachable(tmp_path: Path) -> None:
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    env = _env(DATABASE_URL=closed)
    for args in (("db", "upgrade"), ("token", "create", "--team", "a"), ("token", "list")):
        result = _cli(*args, env=env, cwd=tmp_path)
        assert result.returncode == 1, result
        assert "Traceback" not in result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Cannot reach the database" in lines[0], result.stderr
        assert "Check DATABASE_URL" in lines[0]


def test_an_unmigrated_database_says_what_to_run(pg_url: str, tmp_path: Path) -> None:
    result = _cli("token", "create", "--team", "a", env=_env(DATABASE_URL=pg_url), cwd=tmp_path)
    assert result.returncode == 1
    assert "run `onnx-reducer db upgrade` first" in result.stderr and "Traceback" not in result.stderr


def test_serve_waits_for_its_database_at_start_up(proxy: tuple[TcpProxy, str], tmp_path: Path) -> None:
    tcp, url = proxy
    tcp.stop()
    port = free_port()
    env = _env(DATABASE_URL=url, DATA_DIR=str(tmp_path / "data"), DATABASE_WAIT_S="60")
    server = start(["onnx-reducer", "serve", "--port", str(port)], env, tmp_path, tmp_path / "serve.log")
    try:
        server.wait_for("Retrying for up to 60 s", timeout=30)
        tcp.start()
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
    finally:
        server.stop()
    assert "Traceback" not in server.output()


def test_an_outage_is_503_with_retry_after_then_the_api_recovers(
    proxy: tuple[TcpProxy, str], data_dir: Path, serve_app: Callable[[FastAPI], str], tokens: dict[str, str]
) -> None:
    tcp, url = proxy
    api = serve_app(create_app(ApiSettings(database_url=url, data_dir=data_dir), enqueue=lambda j, q: None))
    with client_for(api, tokens["team-a"]) as client:
        job_id = submit(client, EXAMPLE).json()["id"]
        tcp.stop()
        during = client.get(f"/v1/jobs/{job_id}")
        posted = submit(client, EXAMPLE)
        tcp.start()
        after = client.get(f"/v1/jobs/{job_id}")
    for response in (during, posted):
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "5"
        assert response.headers["content-type"] == "application/problem+json"
        assert "database" in response.json()["detail"]
    assert after.status_code == 200 and after.json()["status"] == "queued"


def test_tokens_are_listed_and_revoked_and_revocation_ends_event_streams(
    db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str], tokens: dict[str, str], tmp_path: Path
) -> None:
    settings = ApiSettings(
        database_url=db_url, data_dir=data_dir, sse_heartbeat_s=0.5, sse_token_check_s=0.2, token_cache_s=0.5
    )
    api = serve_app(create_app(settings, enqueue=lambda j, q: None))
    env = _env(DATABASE_URL=db_url)
    listed = _cli("token", "list", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    token = tokens["team-a"]
    assert token[:12] in listed.stdout and "team-a" in listed.stdout and token not in listed.stdout
    with client_for(api, token) as client:
        job_id = submit(client, EXAMPLE).json()["id"]  # stays queued: its stream stays open
        events: list[str] = []
        stream = threading.Thread(
            target=lambda: events.extend(e.kind for e in read_sse(client, f"/v1/jobs/{job_id}/events", timeout=60)),
            daemon=True,
        )
        stream.start()
        stream.join(2)
        assert stream.is_alive() and events == ["job.queued"]
        revoked = _cli("token", "revoke", token[:12], env=env, cwd=tmp_path)
        assert revoked.returncode == 0 and f"revoked {token[:12]}" in revoked.stdout, revoked
        stream.join(20)
        assert not stream.is_alive()
        assert client.get(f"/v1/jobs/{job_id}").status_code == 401
    again = _cli("token", "list", env=env, cwd=tmp_path)
    row = next(line for line in again.stdout.splitlines() if line.startswith(token[:12]))
    assert not row.rstrip().endswith("-")  # the revoked column is filled
    assert _cli("token", "revoke", token[:12], env=env, cwd=tmp_path).returncode == 2  # nothing left to revoke


def test_the_embedded_home_is_the_same_from_any_folder(tmp_path: Path) -> None:
    user_home = tmp_path / "user"
    env = _env(HOME=str(user_home))
    env.pop("ONNX_REDUCER_HOME", None)
    env.pop("XDG_DATA_HOME", None)
    elsewhere, with_data = tmp_path / "elsewhere", tmp_path / "project"
    (with_data / "data").mkdir(parents=True)
    elsewhere.mkdir()
    first = _cli("token", "create", "--team", "default", env=env, cwd=elsewhere)
    second = _cli("token", "create", "--team", "default", env=env, cwd=with_data)
    assert first.returncode == second.returncode == 0, (first.stderr, second.stderr)
    listed = _cli("token", "list", env=env, cwd=tmp_path).stdout
    assert first.stdout.strip()[:12] in listed and second.stdout.strip()[:12] in listed
    assert (user_home / ".local" / "share" / "onnx-reducer" / "onnx-reducer.db").is_file()
    assert not any((with_data / "data").iterdir())

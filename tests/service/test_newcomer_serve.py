"""`onnx-reducer serve` prints the token command that works for it (issue 20): run from another
shell, with none of the server's environment, it creates a token this server accepts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.service.commands import EMBEDDED_COMMAND
from tests.service.conftest import BIN, client_for
from tests.service.helpers import chain_model, free_port, start, submit, wait_http

pytestmark = pytest.mark.slow


def _shell_env(home: Path) -> dict[str, str]:
    """A user's other terminal: its own HOME, no ONNX_REDUCER_HOME, no virtual environment on PATH."""
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}


def test_the_printed_token_command_works_from_another_shell(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DATA_DIR", "XDG_DATA_HOME")}
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env["ONNX_REDUCER_HOME"] = str(tmp_path / "data")  # as `make run` sets it
    env["ALLOW_COMMAND_CHECKS"] = "true"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    port = free_port()
    server = start([*EMBEDDED_COMMAND, "--port", str(port)], env, tmp_path, tmp_path / "serve.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        server.wait_for("Get a token:", timeout=60)
        match = re.search(r"Get a token: (.+?)  \(send it as", server.output())
        assert match, server.output()
        hint = match.group(1)
        assert hint.startswith(f"ONNX_REDUCER_HOME={tmp_path / 'data'} ") and hint.endswith(
            "token create --team default"
        )

        def token_from(command: str) -> str:
            done = subprocess.run(
                ["bash", "-c", command],
                check=False,
                cwd=elsewhere,
                env=_shell_env(tmp_path / "user"),
                capture_output=True,
            )
            assert done.returncode == 0, done.stderr
            return done.stdout.decode().strip()

        def me(token: str) -> int:
            answer = httpx.get(f"http://127.0.0.1:{port}/v1/me", headers={"Authorization": f"Bearer {token}"})
            return answer.status_code

        token = token_from(hint)
        assert me(token) == 200
        # the hint of old: the token lands in the user's own data folder, which this server never reads
        plain = hint.removeprefix(f"ONNX_REDUCER_HOME={tmp_path / 'data'} ")
        assert me(token_from(plain)) == 401
        _checks_show_under_their_slot(f"http://127.0.0.1:{port}", token)
    finally:
        server.stop()


SLOW_SPEC = json.dumps(
    {"kind": "command", "command": ["sh", "-c", 'sleep 0.5; if grep -q Mul "$1"; then exit 1; fi', "sh", "{model}"]}
)


def _checks_show_under_their_slot(url: str, token: str) -> None:
    """`serve` runs each job in a child process: its checks are claimed under the slot's name."""
    with client_for(url, token) as client:
        job_id = submit(client, chain_model(24, 15).SerializeToString(), SLOW_SPEC, mode="linear").json()["id"]
        names = {w["name"] for w in client.get("/v1/workers").json()["items"]}
        deadline = time.monotonic() + 120
        while not (flights := client.get(f"/v1/jobs/{job_id}").json()["checks_in_flight"]):
            assert time.monotonic() < deadline, "no check seen in flight"
            time.sleep(0.1)
        assert {f["worker"] for f in flights} <= names, (flights, names)
        client.post(f"/v1/jobs/{job_id}/cancel")

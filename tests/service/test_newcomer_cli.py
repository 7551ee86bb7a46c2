"""The command line as a new user first tries it (issue 29): a check spec given through a pipe
(`--check-spec <(...)`: /dev/fd/N, read once) is read by `reduce` and `submit`; the `jobs` listing
has a header naming its columns; `serve` on a port in use prints a one-line hint with a free port
and exits non-zero, not a traceback. Run as the console script, in bash where a pipe is made,
against the embedded service over real HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import onnx
import pytest

from tests.service.conftest import BIN, client_for
from tests.service.helpers import chain_model, submit, wait_job
from tests.service.web_harness import Service

pytestmark = pytest.mark.slow


def _bash(script: str, folder: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``script`` in bash (process substitution needs it), with this environment's onnx-reducer first on PATH."""
    environment = {**os.environ, **(env or {})}
    environment["PATH"] = BIN + os.pathsep + environment.get("PATH", "")
    return subprocess.run(
        ["bash", "-c", script], cwd=folder, env=environment, capture_output=True, text=True, timeout=300, check=False
    )


def _spec_pipe() -> str:
    """The op-present spec as a pipe: `<(printf ...)`."""
    return "<(printf 'kind: op-present\\nops: [Mul]\\n')"


def test_reduce_reads_a_spec_given_through_a_pipe(tmp_path: Path) -> None:
    onnx.save(chain_model(6, 4), tmp_path / "model.onnx")
    done = _bash(f"onnx-reducer reduce model.onnx -o reduced.onnx --no-progress --check-spec {_spec_pipe()}", tmp_path)
    assert done.returncode == 0, done.stderr
    assert [n.op_type for n in onnx.load(tmp_path / "reduced.onnx").graph.node] == ["Mul"]


def test_submit_reads_a_spec_given_through_a_pipe(service: Service, tmp_path: Path) -> None:
    onnx.save(chain_model(6, 4), tmp_path / "model.onnx")
    env = {"ONNX_REDUCER_SERVER": service.url, "ONNX_REDUCER_TOKEN": service.token}
    done = _bash(f"onnx-reducer submit model.onnx --json --check-spec {_spec_pipe()}", tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert "does not exist" not in done.stderr
    with client_for(service.url, service.token) as client:
        job_id = json.loads(done.stdout)["job_id"]
        job = wait_job(client, job_id, timeout=300)
    assert job["status"] == "succeeded", job
    assert "ops: [Mul]" in job["check_spec"]


def test_a_missing_spec_still_says_so(service: Service, tmp_path: Path) -> None:
    onnx.save(chain_model(6, 4), tmp_path / "model.onnx")
    env = {"ONNX_REDUCER_SERVER": service.url, "ONNX_REDUCER_TOKEN": service.token}
    done = _bash("onnx-reducer submit model.onnx --check-spec nowhere.yaml", tmp_path, env)
    assert done.returncode != 0
    assert "'nowhere.yaml' does not exist" in done.stderr and "Traceback" not in done.stderr


def test_the_jobs_listing_has_a_header(service: Service, tmp_path: Path) -> None:
    with client_for(service.url, service.token) as client:
        answer = submit(client, chain_model(4, 2).SerializeToString(), filename="listed.onnx")
        answer.raise_for_status()
        job_id = answer.json()["id"]
    env = {"ONNX_REDUCER_SERVER": service.url, "ONNX_REDUCER_TOKEN": service.token}
    done = _bash("onnx-reducer jobs", tmp_path, env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["JOB", "STATUS", "NODES", "CREATED", "(UTC)", "MODEL"]
    row = next(line for line in lines[1:] if line.startswith(job_id))
    # every column starts under its heading
    for heading, value in (("STATUS", row.split()[1]), ("MODEL", "listed.onnx")):
        assert row.index(value) == lines[0].index(heading), (lines[0], row)


def test_serve_on_a_port_in_use_prints_a_hint_and_exits_non_zero(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        env = {"ONNX_REDUCER_HOME": str(tmp_path / "data")}
        done = _bash(f"onnx-reducer serve --port {port}", tmp_path, env)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        hint = lines[0]
        assert hint.startswith(f"port {port} is in use: try make run PORT=")
        suggested = int(hint.split("PORT=")[1].split()[0])
        assert suggested > port
        with socket.create_server(("127.0.0.1", suggested)):  # the suggested port is free
            pass
        # started by make (MAKELEVEL set), the hint names make's variable only
        under_make = _bash(f"onnx-reducer serve --port {port}", tmp_path, env | {"MAKELEVEL": "1"})
        assert under_make.returncode == 2
        assert under_make.stderr.strip() == f"port {port} is in use: try make run PORT={suggested}"

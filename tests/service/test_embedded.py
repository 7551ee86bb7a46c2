"""The embedded default: ``onnx-reducer serve`` with SQLite, ./data and the in-process runner
(nothing else installed), over real HTTP: the reference example reduced to its single Mul."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import onnx
import pytest

from examples.build_example_model import build_example_model
from tests.service.commands import EMBEDDED_COMMAND
from tests.service.conftest import BIN, client_for
from tests.service.helpers import chain_model, free_port, read_sse, start, submit, wait_http, wait_job
from tests.service.test_end_to_end import cli_min_bad

pytestmark = pytest.mark.slow


def test_embedded_serve_reduces_the_reference_example(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DATA_DIR")}
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env["ONNX_REDUCER_HOME"] = str(tmp_path / "data")  # what `make run` does (the default: the user's data folder)
    port = free_port()
    server = start([*EMBEDDED_COMMAND, "--port", str(port)], env, tmp_path, tmp_path / "serve.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        server.wait_for("token create --team default", timeout=60)
        assert f"http://127.0.0.1:{port}" in server.output()
        token = subprocess.run(
            ["onnx-reducer", "token", "create", "--team", "default"],
            cwd=tmp_path,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        model = build_example_model().SerializeToString()
        with client_for(f"http://127.0.0.1:{port}", token) as client:
            job_id = submit(client, model).json()["id"]
            seen_job_process = _wait_for_child(server.popen.pid, "worker.local_child", timeout=60)
            job = wait_job(client, job_id)
            events = list(read_sse(client, f"/v1/jobs/{job_id}/events"))
            min_bad = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad").content
            again = wait_job(client, submit(client, model).json()["id"])  # the farm cache knows every verdict
            again_events = list(read_sse(client, f"/v1/jobs/{again['id']}/events"))
    finally:
        server.stop()
    assert job["status"] == "succeeded", job
    assert seen_job_process is not None  # the job ran in a child process, not on the api's GIL
    assert (tmp_path / "data" / "onnx-reducer.db").is_file()
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    # checks run on the server's slots at once: their verdicts may land out of order
    numbers = sorted(e.data["number"] for e in events if e.kind == "iteration")
    assert len(numbers) == len(set(numbers)) == job["progress"]["checks_run"] + job["progress"]["cache_hits"]
    assert again["status"] == "succeeded" and again["progress"]["checks_run"] == 0
    assert again["nodes_after"] == job["nodes_after"]
    answered = [e.data for e in again_events if e.kind == "iteration"]
    # every verdict the first job's flow used is answered again; a speculative check of the first
    # job that its flow never needed (phase "ahead": how many depends on timing) may not be
    flow = [e for e in events if e.kind == "iteration" and e.data["phase"] != "ahead"]
    assert len(flow) <= len(answered) <= job["progress"]["checks_run"] + job["progress"]["cache_hits"]
    assert {data["cached"] for data in answered} <= {"farm", "job"} and answered[0]["cached"] == "farm"
    assert [n.op_type for n in onnx.load_from_string(min_bad).graph.node] == ["Mul"]
    assert min_bad == cli_min_bad(tmp_path, model)


def _wait_for_child(pid: int, marker: str, timeout: float) -> int | None:
    """The child of ``pid`` whose command line holds ``marker``, once it appears within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = []  # each thread's children are listed under that thread
        for task in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                children += task.read_text().split()
            except OSError:
                continue
        for child in children:
            try:
                if marker in Path(f"/proc/{child}/cmdline").read_text():
                    return int(child)
            except OSError:
                continue
        time.sleep(0.02)
    return None


def test_a_job_process_ends_with_its_killed_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DATA_DIR")}
    env.update(PATH=BIN + os.pathsep + env.get("PATH", ""), ONNX_REDUCER_HOME=str(tmp_path / "data"))
    port = free_port()
    server = start([*EMBEDDED_COMMAND, "--port", str(port)], env, tmp_path, tmp_path / "serve.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        token = subprocess.run(
            ["onnx-reducer", "token", "create", "--team", "default"],
            cwd=tmp_path,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        with client_for(f"http://127.0.0.1:{port}", token) as client:
            submit(client, chain_model(60, mul_at=40).SerializeToString(), mode="linear")
        child = _wait_for_child(server.popen.pid, "worker.local_child", timeout=60)
        assert child is not None
        server.kill()
        deadline = time.monotonic() + 20
        while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{child}").exists() or "zombie" in Path(f"/proc/{child}/status").read_text()
    finally:
        server.stop()

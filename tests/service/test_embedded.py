"""The embedded default: ``onnx-reducer serve`` with SQLite, ./data and the in-process runner
(nothing else installed), over real HTTP: the reference example reduced to its single Mul."""

from __future__ import annotations

import time
from pathlib import Path

import onnx
import pytest

from examples.build_example_model import build_example_model
from tests.service.conftest import client_for
from tests.service.embedded import embedded_server, wait_for_child
from tests.service.helpers import chain_model, read_sse, submit, wait_job
from tests.service.test_end_to_end import cli_min_bad

pytestmark = pytest.mark.slow


def test_embedded_serve_reduces_the_reference_example(tmp_path: Path) -> None:
    with embedded_server(tmp_path) as server:
        assert server.url in server.proc.output()
        model = build_example_model().SerializeToString()
        with client_for(server.url, server.token) as client:
            job_id = submit(client, model).json()["id"]
            seen_job_process = wait_for_child(server.proc.popen.pid, "worker.local_child", timeout=60)
            job = wait_job(client, job_id)
            events = list(read_sse(client, f"/v1/jobs/{job_id}/events"))
            min_bad = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad").content
            again = wait_job(client, submit(client, model).json()["id"])  # the farm cache knows every verdict
            again_events = list(read_sse(client, f"/v1/jobs/{again['id']}/events"))
    assert job["status"] == "succeeded", job
    assert seen_job_process is not None  # the job ran in a child process, not on the api's GIL
    assert (tmp_path / "data" / "onnx-reducer.db").is_file()
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    # checks run on the server's slots at once: their verdicts may land out of order
    numbers = sorted(e.data["number"] for e in events if e.kind == "iteration")
    assert len(numbers) == len(set(numbers))
    # a speculative check whose verdict lands while the job is finishing is recorded as a late
    # iteration (its event says so) and is not one of the reduction's checks
    counted = [e for e in events if e.kind == "iteration" and not e.data.get("late")]
    assert len(counted) == job["progress"]["checks_run"] + job["progress"]["cache_hits"]
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


def test_an_idle_server_has_a_job_process_ready_before_the_upload(tmp_path: Path) -> None:
    """Each slot starts its next job process ahead (imports done, waiting for a job id), so an
    upload to an idle server starts without a fresh interpreter's seconds of imports."""
    with embedded_server(tmp_path) as server:
        spare = wait_for_child(server.proc.popen.pid, "worker.local_child", timeout=60)
        assert spare is not None, "no job process waits before the first upload"
        with client_for(server.url, server.token) as client:
            job = wait_job(client, submit(client, chain_model(4, 2).SerializeToString()).json()["id"])
        assert job["status"] == "succeeded", job


def test_a_job_process_ends_with_its_killed_server(tmp_path: Path) -> None:
    with embedded_server(tmp_path) as server:
        with client_for(server.url, server.token) as client:
            submit(client, chain_model(60, mul_at=40).SerializeToString(), mode="linear")
        child = wait_for_child(server.proc.popen.pid, "worker.local_child", timeout=60)
        assert child is not None
        server.proc.kill()
        deadline = time.monotonic() + 20
        while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{child}").exists() or "zombie" in Path(f"/proc/{child}/status").read_text()

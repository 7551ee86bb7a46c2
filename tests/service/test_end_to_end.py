"""End to end over HTTP against PostgreSQL, Redis and a real Celery worker process: the reference
example reduced to its single Mul, every iteration event streamed in order, and the result
identical to what ``onnx-reducer reduce`` gives on the command line."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import onnx
import pytest

from examples.build_example_model import build_example_model
from tests.service.conftest import Processes, client_for
from tests.service.helpers import OP_PRESENT_MUL, SseEvent, read_sse, submit, wait_job

pytestmark = pytest.mark.slow


def cli_min_bad(tmp_path: Path, model: bytes, spec: str = OP_PRESENT_MUL) -> bytes:
    folder = tmp_path / "cli"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(model)
    (folder / "spec.yaml").write_text(spec)
    command = ["onnx-reducer", "reduce", "model.onnx", "-o", "min_bad.onnx", "--check-spec", "spec.yaml", "-q"]
    subprocess.run(command, cwd=folder, check=True, capture_output=True, timeout=300)
    return (folder / "min_bad.onnx").read_bytes()


def follow(client_url: str, token: str, job_id: str, sink: list[SseEvent]) -> threading.Thread:
    def run() -> None:
        with client_for(client_url, token) as client:
            sink.extend(read_sse(client, f"/v1/jobs/{job_id}/events"))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_celery_worker_reduces_the_reference_example(
    api_url: str, processes: Processes, tokens: dict[str, str], tmp_path: Path
) -> None:
    processes.worker()
    model = build_example_model().SerializeToString()
    with client_for(api_url, tokens["team-a"]) as client:
        response = submit(client, model)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        assert response.headers["location"] == f"/v1/jobs/{job_id}"
        events: list[SseEvent] = []
        follower = follow(api_url, tokens["team-a"], job_id, events)
        job = wait_job(client, job_id)
        follower.join(60)
        assert job["status"] == "succeeded", job
        assert (job["nodes_before"], job["nodes_after"]) == (5, 1)
        iterations = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
        min_bad = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad")
        original = client.get(f"/v1/jobs/{job_id}/artifacts/original")
        first = client.get(f"/v1/jobs/{job_id}/artifacts/iteration-1")
        min_good = client.get(f"/v1/jobs/{job_id}/artifacts/min-good")

    assert [e.id for e in events] == list(range(1, len(events) + 1))
    assert [e.kind for e in events][:2] == ["job.queued", "job.started"]
    assert events[-1].kind == "job.succeeded"
    streamed = [e.data for e in events if e.kind == "iteration"]
    assert [d["number"] for d in streamed] == [it["number"] for it in iterations] == list(range(1, len(iterations) + 1))
    assert [d["fingerprint"] for d in streamed] == [it["fingerprint"] for it in iterations]
    assert job["progress"]["checks_run"] == len([it for it in iterations if it["cached"] is None])
    assert job["progress"]["cache_hits"] == len([it for it in iterations if it["cached"] == "job"])

    assert min_bad.status_code == 200
    assert min_bad.headers["content-disposition"].startswith("attachment;")
    reduced = onnx.load_from_string(min_bad.content)
    assert [n.op_type for n in reduced.graph.node] == ["Mul"]
    assert min_bad.content == cli_min_bad(tmp_path, model)
    assert original.content == model
    assert onnx.load_from_string(first.content).graph.node[2].op_type == "Mul"
    assert min_good.status_code == 200

"""``task: precision`` jobs: the upload form's ``task`` field, validated at intake (the spec must run
the model in fp16), stored in the job's options, run by a real Celery worker over PostgreSQL and
Redis; the job answers ``keep_fp32`` and its ``mixed`` artifact is the mixed-precision model."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from fastapi import FastAPI

from api.app import create_app
from api.settings import ApiSettings
from checks.fp16_model import is_mixed
from tests.precision_models import COMPARE_FP16, gather_fails_anyway, one_node_overflows, real_fp16_outputs
from tests.service.conftest import Processes, client_for
from tests.service.helpers import submit, wait_job

MODEL = one_node_overflows().SerializeToString()
BAD_GATHER = gather_fails_anyway().SerializeToString()
ERROR_FP16 = "kind: error\ntarget: {runtime: onnxruntime, precision: fp16}\n"


@pytest.mark.slow
def test_a_precision_job_answers_the_overflowing_node_and_its_mixed_model(
    api_url: str, processes: Processes, tokens: dict[str, str], tmp_path: Path
) -> None:
    """Submitted by the CI command (`submit --task precision --wait`), beside the same upload as a
    reduction through the api."""
    processes.worker()
    (tmp_path / "overflow.onnx").write_bytes(MODEL)
    (tmp_path / "spec.yaml").write_text(COMPARE_FP16)
    command = ["onnx-reducer", "submit", "overflow.onnx", "--check-spec", "spec.yaml", "--task", "precision"]
    command += ["--wait", "-o", "out", "--json"]
    env = {**os.environ, "ONNX_REDUCER_SERVER": api_url, "ONNX_REDUCER_TOKEN": tokens["team-a"]}
    with client_for(api_url, tokens["team-a"]) as client:
        reduction = submit(client, MODEL, COMPARE_FP16, "overflow.onnx")
        unrelated = submit(client, BAD_GATHER, ERROR_FP16, "gather.onnx", task="precision")
        assert reduction.status_code == 202 and unrelated.status_code == 202, (reduction.text, unrelated.text)
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
        summary = json.loads(done.stdout)
        job = client.get(f"/v1/jobs/{summary['job_id']}").json()
        reduced = wait_job(client, reduction.json()["id"], timeout=300)
        failed = wait_job(client, unrelated.json()["id"], timeout=300)
        listed = {item["id"]: item for item in client.get("/v1/jobs").json()["items"]}
        iterations = client.get(f"/v1/jobs/{job['id']}/iterations").json()["items"]
        events = client.get(job["links"]["events"]).text

    assert done.returncode == 0, done.stderr
    assert summary["keep_fp32"] == ["scale_up"] and summary["files"] == ["out/mixed.onnx"]
    assert job["status"] == "succeeded", job
    assert job["task"] == "precision" and job["options"]["task"] == "precision"
    assert job["keep_fp32"] == ["scale_up"]
    assert job["nodes_before"] == 4 and job["nodes_after"] == 1
    assert listed[job["id"]]["keep_fp32"] == ["scale_up"]
    assert [i["phase"] for i in iterations[:2]] == ["original", "range"]  # the range analysis' superset
    assert iterations[0]["verdict"] == "fail" and iterations[1]["verdict"] == "pass"
    succeeded = [line for line in events.splitlines() if line.startswith("data:") and "keep_fp32" in line]
    assert len(succeeded) == 1 and json.loads(succeeded[0][5:])["keep_fp32"] == ["scale_up"]
    model = onnx.load(str(tmp_path / "out" / "mixed.onnx"))
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer)
    assert "scale_up" in [node.name for node in model.graph.node]
    # the artifact is the real mixed model, finite with fp16 storage made real (it was judged once more)
    assert is_mixed(model)
    x = np.random.default_rng(3).uniform(70, 100, (2, 3)).astype(np.float32)
    (y, z) = real_fp16_outputs(model, {"x": x})
    assert np.isfinite(y).all() and np.isfinite(z).all()
    # the same upload as a reduction: the default task, no precision answer
    assert reduced["task"] == "reduce" and reduced["keep_fp32"] is None and "task" not in reduced["options"]
    assert "mixed" not in reduced["links"]
    # a model that fails with every node in fp32 too: no precision problem, said so
    assert failed["status"] == "failed" and failed["error"]["code"] == "invalid-check", failed
    assert "not a precision problem" in failed["error"]["message"]


@pytest.fixture
def api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> Iterator[str]:
    settings = ApiSettings(database_url=db_url, data_dir=data_dir)
    yield serve_app(create_app(settings, enqueue=lambda job_id, queue: None))


@pytest.mark.parametrize(
    ("task", "spec", "words"),
    [
        ("precision", "kind: op-present\nops: [Mul]\n", "target {runtime: onnxruntime, precision: fp16}"),
        ("precision", COMPARE_FP16.replace("precision: fp16", "precision: fp32"), "onnxruntime/fp32"),
        ("shrink", COMPARE_FP16, "task must be one of reduce, precision"),
    ],
)
def test_a_task_the_spec_cannot_serve_is_refused_at_intake(
    api: str, tokens: dict[str, str], task: str, spec: str, words: str
) -> None:
    with client_for(api, tokens["team-a"]) as client:
        response = submit(client, MODEL, spec, task=task)
        jobs = client.get("/v1/jobs").json()["items"]
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert words in response.json()["detail"]
    assert jobs == []


def test_the_same_idempotency_key_with_another_task_is_refused(api: str, tokens: dict[str, str]) -> None:
    with client_for(api, tokens["team-a"]) as client:
        first = _submit_keyed(client, "key-1", task="precision")
        again = _submit_keyed(client, "key-1", task="precision")
        other = _submit_keyed(client, "key-1")
    assert first.status_code == 202 and again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert other.status_code == 422, other.text


def _submit_keyed(client: httpx.Client, key: str, **fields: str) -> httpx.Response:
    files = {"model": ("overflow.onnx", MODEL)}
    data = {"check_spec": COMPARE_FP16, **fields}
    return client.post("/v1/jobs", files=files, data=data, headers={"Idempotency-Key": key})

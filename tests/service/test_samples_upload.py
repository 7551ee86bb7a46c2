"""Input samples in the service (issue 22): POST /v1/jobs takes ``inputs`` file parts (repeatable;
.npz or Polygraphy JSON, one or many samples each), checks every input against the model before a
job exists (one line naming the input, the model's shape and type and the file's), refuses what
cannot be honoured, stores the files in order, and the worker's check judges every sample:
``GET /v1/jobs/{id}`` names the failing ones.

The model: a 30-node chain whose Mul overflows fp16 only for large inputs; of three samples only
the second (large) one fails a compare fp32-vs-fp16 spec."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from fastapi import FastAPI
from polygraphy.json import save_json

from api.app import create_app
from api.settings import ApiSettings
from bench.samples_bench import input_overflow_chain
from tests.service.conftest import Processes, client_for
from tests.service.helpers import wait_job
from tests.service.test_bad_input import _stored

COMPARE = """\
kind: compare
reference: {runtime: onnxruntime}
target: {runtime: onnxruntime, precision: fp16}
tolerance: {atol: 0.01, rtol: 0.01}
"""
MODEL = input_overflow_chain().SerializeToString()
BIG = np.full((1, 8), 100.0, np.float32)
SMALL = np.full((1, 8), 0.5, np.float32)


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def _post(
    client: httpx.Client, inputs: list[tuple[str, bytes]], spec: str = COMPARE, golden: bytes | None = None
) -> httpx.Response:
    files: list[tuple[str, tuple[str, bytes]]] = [("model", ("chain.onnx", MODEL))]
    if golden is not None:
        files.append(("golden", ("values.json", golden)))
    files += [("inputs", item) for item in inputs]
    return client.post("/v1/jobs", files=files, data={"check_spec": spec})


# -- end to end: PostgreSQL, Redis, a Celery worker ----------------------------------------------


@pytest.mark.slow
def test_only_the_second_of_three_samples_fails_and_the_job_says_so(
    api_url: str, processes: Processes, tokens: dict[str, str]
) -> None:
    processes.worker()
    inputs = [("small.npz", _npz(x=SMALL)), ("big.npz", _npz(x=BIG)), ("small2.npz", _npz(x=SMALL))]
    with client_for(api_url, tokens["team-a"]) as client:
        response = _post(client, inputs)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        job = wait_job(client, job_id, timeout=300)
        shown = client.get(f"/v1/jobs/{job_id}").json()
        min_bad = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad").content
        alone = _post(client, [("small.npz", _npz(x=SMALL))])
        passed = wait_job(client, alone.json()["id"], timeout=300)

    assert job["status"] == "succeeded", job
    assert [node.name for node in onnx.load_from_string(min_bad).graph.node] == ["n15_overflow"]
    assert shown["samples"] == {"original": {"judged": 3, "failing": [1]}, "min_bad": {"judged": 3, "failing": [1]}}
    # the user's passing sample is judged, not generated inputs: the original does not fail
    assert passed["status"] == "failed" and passed["error"]["code"] == "original-did-not-fail", passed


# -- intake only: the api with a no-op queue --------------------------------------------------------


@pytest.fixture
def api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> Iterator[str]:
    settings = ApiSettings(database_url=db_url, data_dir=data_dir)
    yield serve_app(create_app(settings, enqueue=lambda job_id, queue: None))


def test_input_files_are_stored_in_order_and_json_samples_count(
    api: str, tokens: dict[str, str], tmp_path: Path
) -> None:
    save_json([{"x": SMALL}, {"x": BIG}], str(tmp_path / "two.json"))
    inputs = [("big.npz", _npz(x=BIG)), ("two.json", (tmp_path / "two.json").read_bytes())]
    with client_for(api, tokens["team-a"]) as client:
        response = _post(client, inputs)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        first = client.get(f"/v1/jobs/{job_id}/artifacts/inputs-0")
        second = client.get(f"/v1/jobs/{job_id}/artifacts/inputs-1")
    with client_for(api, tokens["team-b"]) as other:
        foreign = other.get(f"/v1/jobs/{job_id}/artifacts/inputs-0")

    assert first.content == inputs[0][1] and "big.npz" in first.headers["content-disposition"]
    assert second.content == inputs[1][1] and "two.json" in second.headers["content-disposition"]
    assert foreign.status_code == 404


def test_the_same_key_with_other_inputs_is_refused(api: str, tokens: dict[str, str]) -> None:
    with client_for(api, tokens["team-a"]) as client:
        files = [("model", ("chain.onnx", MODEL)), ("inputs", ("big.npz", _npz(x=BIG)))]
        headers = {"Idempotency-Key": "samples-key"}
        first = client.post("/v1/jobs", files=files, data={"check_spec": COMPARE}, headers=headers)
        again = client.post("/v1/jobs", files=files, data={"check_spec": COMPARE}, headers=headers)
        other = [("model", ("chain.onnx", MODEL)), ("inputs", ("small.npz", _npz(x=SMALL)))]
        changed = client.post("/v1/jobs", files=other, data={"check_spec": COMPARE}, headers=headers)
    assert first.status_code == 202 and again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert changed.status_code == 422, changed.text


BAD: dict[str, tuple[list[tuple[str, bytes]], str, bytes | None, list[str]]] = {
    "stacked samples": (
        [("stacked.npz", _npz(x=np.stack([BIG, SMALL])))],
        COMPARE,
        None,
        ["Input 'x'", "stacked.npz", "float32 [1, 8]", "float32 [2, 1, 8]"],
    ),
    "another type": ([("x64.npz", _npz(x=BIG.astype(np.float64)))], COMPARE, None, ["float64 [1, 8]"]),
    "no model input": ([("typo.npz", _npz(X=BIG))], COMPARE, None, ["typo.npz", "none of the model's inputs"]),
    "not tensors": ([("notes.npz", b"hello, not an archive")], COMPARE, None, ["notes.npz", "neither"]),
    "a kind that runs no inputs": ([("big.npz", _npz(x=BIG))], "kind: op-present\nops: [Mul]\n", None, ["op-present"]),
    "golden values besides": (
        [("big.npz", _npz(x=BIG))],
        COMPARE,
        b"(Polygraphy JSON written below)",
        ["'golden' field gives the check's samples too"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_inputs_that_cannot_be_honoured_are_one_problem_naming_the_field(
    case: str, api: str, tokens: dict[str, str], db_url: str, data_dir: Path, tmp_path: Path
) -> None:
    inputs, spec, golden, words = BAD[case]
    if golden is not None:
        save_json([{"x": BIG}], str(tmp_path / "values.json"))
        golden = (tmp_path / "values.json").read_bytes()
    with client_for(api, tokens["team-a"]) as client:
        response = _post(client, inputs, spec, golden)

    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["detail"].startswith("The 'inputs' field:"), problem
    assert "\n" not in problem["detail"]
    for word in words:
        assert word in problem["detail"], problem
    assert any(error.get("field") == "inputs" for error in problem.get("errors", [])), problem
    assert _stored(db_url, data_dir) == (0, [])


def test_golden_values_whose_input_does_not_fit_are_refused_in_one_line(
    api: str, tokens: dict[str, str], db_url: str, data_dir: Path, tmp_path: Path
) -> None:
    save_json([{"x": np.stack([BIG, SMALL])}], str(tmp_path / "stacked.json"))
    with client_for(api, tokens["team-a"]) as client:
        response = _post(client, [], golden=(tmp_path / "stacked.json").read_bytes())

    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["detail"].startswith("The 'golden' field: Input 'x'"), problem
    assert "float32 [1, 8]" in problem["detail"] and "float32 [2, 1, 8]" in problem["detail"]
    assert "\n" not in problem["detail"]
    assert _stored(db_url, data_dir) == (0, [])


def test_submit_sends_every_input_file_in_order_and_a_bad_one_exits_2(
    api: str, tokens: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "chain.onnx").write_bytes(MODEL)
    (tmp_path / "spec.yaml").write_text(COMPARE)
    (tmp_path / "small.npz").write_bytes(_npz(x=SMALL))
    (tmp_path / "big.npz").write_bytes(_npz(x=BIG))
    (tmp_path / "stacked.npz").write_bytes(_npz(x=np.stack([BIG, SMALL])))
    env = {**os.environ, "ONNX_REDUCER_SERVER": api, "ONNX_REDUCER_TOKEN": tokens["team-a"]}

    def submit(*files: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "reducer_cli.main", "submit", "chain.onnx", "--check-spec", "spec.yaml"]
        return subprocess.run(
            [*command, "--json", "--load-inputs", *files],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    sent = submit("big.npz", "small.npz")
    refused = submit("small.npz", "stacked.npz")

    assert sent.returncode == 0, sent.stderr
    job_id = json.loads(sent.stdout)["job_id"]
    with client_for(api, tokens["team-a"]) as client:
        stored = [client.get(f"/v1/jobs/{job_id}/artifacts/inputs-{i}").content for i in range(2)]
    assert stored == [(tmp_path / "big.npz").read_bytes(), (tmp_path / "small.npz").read_bytes()]
    assert refused.returncode == 2, refused.stderr
    assert "Input 'x'" in refused.stdout + refused.stderr and "float32 [2, 1, 8]" in refused.stdout + refused.stderr

"""Golden values in the service: POST /v1/jobs takes an optional ``golden`` file (the zip of
``onnx-reducer golden``, or Polygraphy JSON), validates and stores it, the worker feeds it to the
check, and GET /v1/jobs/{id}/artifacts/golden returns it to the job's team only.

The planted fp16 overflow shows that the worker really uses it: fed fresh random inputs, the lone
overflowing Mul stays in range and reduction must keep the scaling node before it; fed the golden
boundary values, the job reduces to exactly the overflowing node, as the command line does with
``--golden``."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
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
from checks.golden import GoldenStore
from tests.checks.conftest import COMPARE_FP16
from tests.checks.models import overflow_model
from tests.service.conftest import Processes, client_for
from tests.service.helpers import wait_job
from tests.service.test_bad_input import _stored

MAX_UPLOAD = 200_000
MAX_EXTRACTED = 100_000
GOLDEN_FP16 = """\
kind: golden
target: {runtime: onnxruntime, precision: fp16}
tolerance: {atol: 0.001, rtol: 0.001}
"""
MODEL = overflow_model().SerializeToString()
CLI = [sys.executable, "-m", "reducer_cli.main"]


@pytest.fixture(scope="module")
def golden_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The overflow model's golden zip (``onnx-reducer golden``) and the same values as Polygraphy
    JSON (one feed dict holding the inputs and every intermediate tensor)."""
    folder = tmp_path_factory.mktemp("golden")
    (folder / "model.onnx").write_bytes(MODEL)
    command = [*CLI, "golden", "model.onnx", "-o", "model.golden"]
    subprocess.run(command, cwd=folder, check=True, capture_output=True, timeout=120)
    store = GoldenStore.open(folder / "model.golden")
    save_json([{name: store.read(0, name) for name in store.names(0)}], str(folder / "layerwise.json"))
    store.close()
    return {"zip": (folder / "model.golden").read_bytes(), "json": (folder / "layerwise.json").read_bytes()}


def _post(
    client: httpx.Client, golden: bytes | None, spec: str = COMPARE_FP16, name: str = "model.golden"
) -> httpx.Response:
    files = {"model": ("overflow.onnx", MODEL)}
    if golden is not None:
        files["golden"] = (name, golden)
    return client.post("/v1/jobs", files=files, data={"check_spec": spec})


def _cli_min_bad(tmp_path: Path, golden: bytes, spec: str) -> bytes:
    folder = tmp_path / "cli"
    folder.mkdir(exist_ok=True)
    (folder / "model.onnx").write_bytes(MODEL)
    (folder / "model.golden").write_bytes(golden)
    (folder / "spec.yaml").write_text(spec)
    command = [*CLI, "reduce", "model.onnx", "-o", "min_bad.onnx", "--check-spec", "spec.yaml"]
    command += ["--golden", "model.golden", "-q"]
    subprocess.run(command, cwd=folder, check=True, capture_output=True, timeout=300)
    return (folder / "min_bad.onnx").read_bytes()


def _node_names(model: bytes) -> list[str]:
    return [node.name for node in onnx.load_from_string(model).graph.node]


# -- end to end: PostgreSQL, Redis, a Celery worker ----------------------------------------------


@pytest.mark.slow
def test_golden_upload_reduces_the_overflow_to_exactly_its_node_like_the_cli(
    api_url: str, processes: Processes, tokens: dict[str, str], tmp_path: Path, golden_files: dict[str, bytes]
) -> None:
    processes.worker()
    with client_for(api_url, tokens["team-a"]) as client:
        submitted = {
            "compare+zip": _post(client, golden_files["zip"]),
            "compare+json": _post(client, golden_files["json"], name="layerwise.json"),
            "golden+zip": _post(client, golden_files["zip"], GOLDEN_FP16),
            "compare, no golden": _post(client, None),
        }
        assert all(r.status_code == 202 for r in submitted.values()), {k: r.text for k, r in submitted.items()}
        ids = {case: response.json()["id"] for case, response in submitted.items()}
        jobs = {case: wait_job(client, job_id, timeout=300) for case, job_id in ids.items()}
        min_bad = {case: client.get(f"/v1/jobs/{job_id}/artifacts/min-bad").content for case, job_id in ids.items()}
        golden = client.get(f"/v1/jobs/{ids['compare+zip']}/artifacts/golden")
        no_golden = client.get(f"/v1/jobs/{ids['compare, no golden']}/artifacts/golden")
    with client_for(api_url, tokens["team-b"]) as other:
        foreign = other.get(f"/v1/jobs/{ids['compare+zip']}/artifacts/golden")

    assert all(job["status"] == "succeeded" for job in jobs.values()), jobs
    for case in ("compare+zip", "compare+json", "golden+zip"):
        assert _node_names(min_bad[case]) == ["overflow"], case
    # without golden boundary values the lone Mul stays in fp16 range: the scaling node must stay
    assert _node_names(min_bad["compare, no golden"]) == ["scale_up", "overflow"]
    assert min_bad["compare+zip"] == _cli_min_bad(tmp_path, golden_files["zip"], COMPARE_FP16)

    assert golden.status_code == 200
    assert golden.content == golden_files["zip"]
    assert golden.headers["content-disposition"].startswith("attachment;")
    assert "model.golden" in golden.headers["content-disposition"]
    assert no_golden.status_code == 404
    assert foreign.status_code == 404
    assert foreign.headers["content-type"] == "application/problem+json"


# -- intake only: the api with a no-op queue --------------------------------------------------------


@pytest.fixture
def api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> Iterator[str]:
    settings = ApiSettings(
        database_url=db_url, data_dir=data_dir, max_upload_bytes=MAX_UPLOAD, max_extracted_bytes=MAX_EXTRACTED
    )
    yield serve_app(create_app(settings, enqueue=lambda job_id, queue: None))


def _zip(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED, symlink: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        if symlink is not None:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = 0o120777 << 16
            archive.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def _npy(value: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, value, allow_pickle=True)
    return buffer.getvalue()


def _manifest(entries: dict[str, str]) -> bytes:
    tensors = [{"sample": "0", "name": name, "entry": entry} for name, entry in entries.items()]
    return json.dumps({"format": "onnx-reducer-golden/1", "model": "m", "inputs": ["x"], "tensors": tensors}).encode()


X = _npy(np.zeros((1, 16), np.float32))
BAD_GOLDEN: dict[str, tuple[bytes, int, str]] = {
    "not-zip-or-json": (b"\x00\x01 certainly not golden values" * 10, 422, "neither a golden-values zip nor"),
    "dotdot-member": (_zip({"manifest.json": _manifest({"x": "../x.npy"}), "../x.npy": X}), 422, "'..'"),
    "absolute-member": (_zip({"manifest.json": _manifest({"x": "/x.npy"}), "/x.npy": X}), 422, "absolute"),
    "symlink-member": (_zip({"manifest.json": _manifest({"x": "x.npy"})}, symlink="x.npy"), 422, "symlink"),
    "zip-bomb": (
        _zip({"manifest.json": _manifest({"x": "x.npy"}), "x.npy": b"\0" * (MAX_EXTRACTED * 10)}, zipfile.ZIP_DEFLATED),
        422,
        f"bytes, more than the {MAX_EXTRACTED} left of the {MAX_EXTRACTED} allowed for the upload's tensors",
    ),
    "npz-without-manifest": (_zip({"x.npy": X}), 422, "no manifest.json"),
    "foreign-manifest": (_zip({"manifest.json": b'{"format": "other/9", "tensors": []}', "x.npy": X}), 422, "other/9"),
    "missing-entry": (_zip({"manifest.json": _manifest({"x": "x.npy", "s": "s.npy"}), "x.npy": X}), 422, "s.npy"),
    "pickled-entry": (
        _zip({"manifest.json": _manifest({"x": "x.npy"}), "x.npy": _npy(np.array([{"a": 1}], dtype=object))}),
        422,
        "python objects",
    ),
    "not-npy-entry": (_zip({"manifest.json": _manifest({"x": "x.npy"}), "x.npy": b"hello"}), 422, ".npy"),
    "json-without-tensors": (b'{"x": [1, 2, 3]}', 422, "no tensors"),
    "json-bad-array": (b'[{"x": {"polygraphy_class": "ndarray", "array": "%%%"}}]', 422, "not Polygraphy"),
    "json-broken": (b'[{"x": ', 422, "not Polygraphy"),
    "too-large": (b"{" + b" " * MAX_UPLOAD, 413, "MAX_UPLOAD_BYTES"),
}


@pytest.mark.parametrize("case", sorted(BAD_GOLDEN))
def test_a_bad_golden_file_is_a_problem_naming_the_field_and_stores_nothing(
    case: str, api: str, tokens: dict[str, str], db_url: str, data_dir: Path
) -> None:
    body, status, words = BAD_GOLDEN[case]
    with client_for(api, tokens["team-a"]) as client:
        response = _post(client, body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == status and problem["title"]
    assert words.lower() in problem["detail"].lower(), problem
    if status == 422:
        assert "'golden'" in problem["detail"], problem
    assert _stored(db_url, data_dir) == (0, [])


def test_kind_golden_without_a_golden_upload_says_to_upload_the_field(
    api: str, tokens: dict[str, str], db_url: str, data_dir: Path
) -> None:
    with client_for(api, tokens["team-a"]) as client:
        response = _post(client, None, GOLDEN_FP16)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert "upload them in the 'golden' file field" in response.json()["detail"]
    assert _stored(db_url, data_dir) == (0, [])


@pytest.mark.parametrize("fmt", ["zip", "json"])
def test_a_golden_upload_is_stored_as_an_artifact_of_its_team(
    fmt: str, api: str, tokens: dict[str, str], golden_files: dict[str, bytes]
) -> None:
    with client_for(api, tokens["team-a"]) as client:
        response = _post(client, golden_files[fmt], GOLDEN_FP16, name=f"values.{fmt}")
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        golden = client.get(f"/v1/jobs/{job_id}/artifacts/golden")
        original = client.get(f"/v1/jobs/{job_id}/artifacts/original")
    with client_for(api, tokens["team-b"]) as other:
        foreign = other.get(f"/v1/jobs/{job_id}/artifacts/golden")
    assert golden.status_code == 200
    assert golden.content == golden_files[fmt]
    assert f"values.{fmt}" in golden.headers["content-disposition"]
    assert original.content == MODEL
    assert foreign.status_code == 404

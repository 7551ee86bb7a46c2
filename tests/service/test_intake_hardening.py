"""What a hostile upload or request must never do to the api: stall the event loop, inflate a bomb,
answer 500, or show a server path. Each answer is a 4xx (or 503 + Retry-After when intake is
saturated) problem+json, and nothing is left half-stored."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
from fastapi import FastAPI
from onnx import TensorProto, helper, numpy_helper

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from persistence.db import Database
from persistence.migrate import upgrade
from persistence.repositories import TeamRepository
from tests.checks.test_op_not_registered import _custom_op_model
from tests.service.conftest import client_for
from tests.service.helpers import OP_PRESENT_MUL, submit, tar_bundle
from tests.service.test_bad_input import _external_weights_model, _model, _stored
from worker.context import context_from_settings
from worker.run_job import run_job
from worker.settings import WorkerSettings

EXAMPLE = build_example_model().SerializeToString()
MAX_UPLOAD = 4_000_000


def _settings(db_url: str, data_dir: Path, **overrides: Any) -> ApiSettings:
    values: dict[str, Any] = {
        "database_url": db_url,
        "data_dir": data_dir,
        "max_upload_bytes": MAX_UPLOAD,
        "declared_bytes_floor": 1 << 20,
        "max_extracted_bytes": 1 << 20,
        "max_bundle_members": 50,
    }
    values.update(overrides)
    return ApiSettings(**values)


@pytest.fixture
def api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> Iterator[str]:
    yield serve_app(create_app(_settings(db_url, data_dir), enqueue=lambda job_id, queue: None))


def _problem(response: httpx.Response, status: int, words: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert words.lower() in problem["detail"].lower(), problem
    return problem


# --- check specs ---------------------------------------------------------------------------------

LAUGHS = "kind: op-present\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"l{i}: &l{i} [{', '.join([f'*{prev}'] * 10)}]\n" for i, prev in enumerate(["a", *[f"l{j}" for j in range(8)]])
)
SPECS = {
    "billion-laughs": (LAUGHS, "aliases"),
    "deep-nesting": ("kind: op-present\nops: " + "[" * 20000 + "]" * 20000, "nested"),
    "huge-repeat": ("kind: op-present\nops: [Mul]\nrepeat: 1000000000", "repeat: must be at most"),
    "timeout-beyond-job-limit": ("kind: op-present\nops: [Mul]\ntimeout: 3000\nrepeat: 10", "JOB_TIME_LIMIT_S"),
}


@pytest.mark.parametrize("case", sorted(SPECS))
def test_hostile_check_specs_are_422_quickly(
    case: str, api: str, tokens: dict[str, str], db_url: str, data_dir: Path
) -> None:
    spec, words = SPECS[case]
    with client_for(api, tokens["team-a"]) as client:
        response = submit(client, EXAMPLE, spec)
    problem = _problem(response, 422, words)
    assert len(problem["detail"]) < 400
    assert _stored(db_url, data_dir) == (0, [])


# --- bundles and models ----------------------------------------------------------------------------


def _tar_gz_bomb_then_garbage() -> bytes:
    """A tar.gz whose first member alone unpacks beyond the cap, followed by a corrupt tail: read
    as a stream it is refused at the first member; read whole it would fail at the tail instead."""
    raw = tar_bundle({"model.onnx": EXAMPLE, "w.bin": b"\0" * (3 << 20)})
    return gzip.compress(raw[: len(raw) - 4096]) + b"garbage that is not gzip" * 100


def _many_members() -> bytes:
    return gzip.compress(tar_bundle({"model.onnx": EXAMPLE, **{f"empty/{i}": b"" for i in range(80)}}))


def _constant_of_shape_bomb() -> bytes:
    shape = numpy_helper.from_array(np.array([100_000, 100_000, 100], np.int64), "s")
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])]
    return _model(nodes, [shape])


def _then_reduced(op: str, size: list[int]) -> bytes:
    """x [1, 2] -> ``op`` with a constant size -> a huge [1e9, 2] tensor -> ReduceMean -> [1, 2]."""
    constant = numpy_helper.from_array(np.array(size, np.int64), "s")
    nodes = [
        helper.make_node(op, ["x", "s"], ["big"]),
        helper.make_node("ReduceMean", ["big"], ["r"], axes=[0], keepdims=1),
        helper.make_node("Add", ["x", "r"], ["y"]),
    ]
    return _model(nodes, [constant], shape=[1, 2])


def _expand_bomb() -> bytes:
    return _then_reduced("Expand", [1_000_000_000, 2])


def _tile_bomb() -> bytes:
    return _then_reduced("Tile", [1_000_000_000, 1])


def _range_bomb() -> bytes:
    bounds = [numpy_helper.from_array(np.array(v, np.float32), n) for v, n in ((0, "a"), (1e12, "b"), (1, "c"))]
    nodes = [helper.make_node("Range", ["a", "b", "c"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])]
    return _model(nodes, bounds)


def _external_key(key: str) -> bytes:
    model = onnx.load_from_string(_external_weights_model("w.bin"))
    entry = model.graph.initializer[0].external_data.add()
    entry.key, entry.value = key, "x"
    return tar_bundle({"model.onnx": model.SerializeToString(), "w.bin": np.ones(4, np.float32).tobytes()})


def _py_op() -> bytes:
    node = helper.make_node("PyOp", ["x"], ["y"], domain="com.microsoft", module="os", class_name="system")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8
    return model.SerializeToString()


def _chain(nodes: int) -> bytes:
    made = [
        helper.make_node("Relu", [f"t{i}" if i else "x"], [f"t{i + 1}" if i < nodes - 1 else "y"]) for i in range(nodes)
    ]
    return _model(made)


MODELS = {
    "tar-gz-bomb-refused-while-reading": (_tar_gz_bomb_then_garbage(), "unpacks to more than"),
    "too-many-members": (_many_members(), "more than 50 members"),
    "constant-of-shape-bomb": (_constant_of_shape_bomb(), "ConstantOfShape"),
    "expand-bomb": (_expand_bomb(), "Expand"),
    "tile-bomb": (_tile_bomb(), "Tile"),
    "range-bomb": (_range_bomb(), "Range"),
    "external-key-class": (_external_key("__class__"), "allowed keys are location, offset, length, checksum"),
    "external-key-basepath": (_external_key("basepath"), "'basepath'"),
    "python-op": (_py_op(), "runs Python code"),
}


@pytest.mark.parametrize("case", sorted(MODELS))
def test_hostile_models_and_bundles_are_422(
    case: str, api: str, tokens: dict[str, str], db_url: str, data_dir: Path
) -> None:
    body, words = MODELS[case]
    with client_for(api, tokens["team-a"]) as client:
        response = submit(client, body, filename="upload.bin")
    _problem(response, 422, words)
    assert _stored(db_url, data_dir) == (0, [])


def test_node_count_cap(
    db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str], tokens: dict[str, str]
) -> None:
    api = serve_app(create_app(_settings(db_url, data_dir, max_model_nodes=10), enqueue=lambda j, q: None))
    with client_for(api, tokens["team-a"]) as client:
        refused = submit(client, _chain(11))
        accepted = submit(client, _chain(10), "kind: op-present\nops: [Relu]\n")
    _problem(refused, 422, "MAX_MODEL_NODES")
    assert accepted.status_code == 202, accepted.text


def test_problems_name_files_as_uploaded_never_server_paths(api: str, tokens: dict[str, str], data_dir: Path) -> None:
    missing_weights = tar_bundle({"sub/model.onnx": _external_weights_model("w.bin")})
    with client_for(api, tokens["team-a"]) as client:
        response = submit(client, missing_weights, filename="bundle.tar")
    problem = _problem(response, 422, "'w.bin' was not found")
    text = json.dumps(problem)
    assert str(data_dir) not in text and str(data_dir.resolve()) not in text
    assert "staging" not in text


# --- golden values -------------------------------------------------------------------------------


def _npy_header_only(shape: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buffer.getvalue() + b"\0" * 64


def _npz_bomb() -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, x=np.zeros(100 * 2**20, np.uint8))  # 100 MiB of zeros, ~100 KB zipped
    return buffer.getvalue()


def _golden_json(payload: bytes) -> bytes:
    return json.dumps([{"x": {"array": base64.b64encode(payload).decode(), "polygraphy_class": "ndarray"}}]).encode()


def _golden_zip_with_lying_header() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        manifest = {"format": "onnx-reducer-golden/1", "tensors": [{"sample": "0", "name": "x", "entry": "s0/0.npy"}]}
        archive.writestr("manifest.json", json.dumps(manifest))
        archive.writestr("s0/0.npy", _npy_header_only((1 << 40,)))
    return buffer.getvalue()


GOLDEN = {
    "json-npz-bomb": (_golden_json(_npz_bomb()), "beyond the limit"),
    "json-npy-3.6-TiB": (_golden_json(_npy_header_only((1 << 40,))), "declares 4398046511104 bytes"),
    "zip-npy-3.6-TiB": (_golden_zip_with_lying_header(), "declares 4398046511104 bytes"),
}


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_golden_bombs_are_refused_before_decoding(
    case: str, api: str, tokens: dict[str, str], db_url: str, data_dir: Path
) -> None:
    body, words = GOLDEN[case]
    with client_for(api, tokens["team-a"]) as client:
        response = client.post(
            "/v1/jobs",
            files={"model": ("m.onnx", EXAMPLE), "golden": ("golden.bin", body)},
            data={"check_spec": OP_PRESENT_MUL},
        )
    _problem(response, 422, words)
    assert _stored(db_url, data_dir) == (0, [])


# --- the event loop stays free; saturation is a 503 --------------------------------------------------


class _Upload(threading.Thread):
    """POST a model from a thread; ``sent`` is set once the whole body went out."""

    def __init__(self, api: str, token: str, model: bytes) -> None:
        super().__init__(daemon=True)
        self.api, self.token, self.model = api, token, model
        self.sent = threading.Event()
        self.response: httpx.Response | None = None

    def run(self) -> None:
        boundary = "hardeningboundary"
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="check_spec"\r\n\r\n{OP_PRESENT_MUL}\r\n'
                f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="big.onnx"\r\n\r\n'
            ).encode()
            + self.model
            + f"\r\n--{boundary}--\r\n".encode()
        )

        def chunks() -> Iterator[bytes]:
            for i in range(0, len(body), 1 << 16):
                yield body[i : i + (1 << 16)]
            self.sent.set()

        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        with client_for(self.api, self.token) as client:
            self.response = client.post("/v1/jobs", content=chunks(), headers=headers, timeout=300)


BIG = 150_000  # nodes: a few seconds of parsing, sorting and checking


@pytest.fixture(scope="module")
def big_model() -> bytes:
    return _chain(BIG)


def test_healthz_answers_while_a_big_model_is_inspected(api: str, tokens: dict[str, str], big_model: bytes) -> None:
    upload = _Upload(api, tokens["team-a"], big_model)
    upload.start()
    assert upload.sent.wait(120)
    answered_during = 0
    while upload.is_alive():
        response = httpx.get(api + "/healthz", timeout=120)
        if upload.is_alive():
            answered_during += response.status_code == 200
        time.sleep(0.05)
    assert upload.response is not None and upload.response.status_code == 202, upload.response
    assert answered_during >= 3  # on the event loop, none could answer until the inspection ended


def test_a_saturated_intake_answers_503_with_retry_after(
    db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str], tokens: dict[str, str], big_model: bytes
) -> None:
    settings = _settings(db_url, data_dir, intake_workers=1, intake_max_pending=1)
    app = create_app(settings, enqueue=lambda j, q: None)
    api = serve_app(app)
    upload = _Upload(api, tokens["team-a"], big_model)
    upload.start()
    assert upload.sent.wait(120)
    deadline = time.monotonic() + 120
    while app.state.services.intake.pending == 0 and upload.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)  # the upload holds the one intake place (its inspection began)
    with client_for(api, tokens["team-a"]) as client:
        busy = submit(client, EXAMPLE)
    upload.join(300)
    _problem(busy, 503, "send the job again")
    assert busy.headers["retry-after"] == "5"
    assert upload.response is not None and upload.response.status_code == 202


# --- request fields --------------------------------------------------------------------------------


def test_bad_resume_points_are_4xx_not_500(api: str, tokens: dict[str, str]) -> None:
    with client_for(api, tokens["team-a"]) as client:
        job = submit(client, EXAMPLE).json()["id"]
        for value in ("١٢٣", "²", "1" * 5000, "-1", "12abc"):
            response = client.get(f"/v1/jobs/{job}/events", headers={"Last-Event-ID": value.encode()})
            _problem(response, 400, "Last-Event-ID")
        for path in (f"/v1/jobs/{job}/events", f"/v1/jobs/{job}/iterations"):
            response = client.get(path, params={"after": "99999999999999999999"})
            assert response.status_code == 422, response.text


def test_bad_resume_points_on_sqlite(tmp_path: Path, serve_app: Callable[[FastAPI], str]) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    database = Database(url)
    with database.session() as session:
        token = TeamRepository(session).create_token(TeamRepository(session).get_or_create("t"))
    database.dispose()
    api = serve_app(create_app(_settings(url, tmp_path / "data"), enqueue=lambda j, q: None))
    with client_for(api, token) as client:
        job = submit(client, EXAMPLE).json()["id"]
        for path in (f"/v1/jobs/{job}/events", f"/v1/jobs/{job}/iterations"):
            response = client.get(path, params={"after": str(2**63 + 5)})
            assert response.status_code == 422, response.text


def test_a_truncated_multipart_body_is_400(api: str, tokens: dict[str, str], db_url: str, data_dir: Path) -> None:
    boundary = "truncatedboundary"
    body = (
        (f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="m.onnx"\r\n\r\n').encode()
        + EXAMPLE
        + (
            f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="check_spec"\r\n\r\n{OP_PRESENT_MUL}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="mode"\r\n\r\nbis'
        ).encode()
    )
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    with client_for(api, tokens["team-a"]) as client:
        response = client.post("/v1/jobs", content=body, headers=headers)
    _problem(response, 400, "closing boundary")
    assert _stored(db_url, data_dir) == (0, [])


def test_an_idempotency_key_reused_for_another_request_is_422(api: str, tokens: dict[str, str]) -> None:
    headers = {"Idempotency-Key": "key-1"}
    with client_for(api, tokens["team-a"]) as client:
        first = client.post(
            "/v1/jobs", headers=headers, files={"model": ("m.onnx", EXAMPLE)}, data={"check_spec": OP_PRESENT_MUL}
        )
        other_spec = client.post(
            "/v1/jobs",
            headers=headers,
            files={"model": ("m.onnx", EXAMPLE)},
            data={"check_spec": "kind: op-present\nops: [Add]\n"},
        )
        other_model = client.post(
            "/v1/jobs", headers=headers, files={"model": ("m.onnx", _chain(3))}, data={"check_spec": OP_PRESENT_MUL}
        )
        same = client.post(
            "/v1/jobs", headers=headers, files={"model": ("m.onnx", EXAMPLE)}, data={"check_spec": OP_PRESENT_MUL}
        )
    assert first.status_code == 202
    _problem(other_spec, 422, "different request")
    _problem(other_model, 422, "different request")
    assert same.status_code == 202 and same.json()["id"] == first.json()["id"]


# --- staging left by a killed api ---------------------------------------------------------------------


def test_stale_staging_folders_are_swept_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    stale, fresh = data / "staging" / "stale", data / "staging" / "fresh"
    for folder in (stale, fresh):
        folder.mkdir(parents=True)
        (folder / "upload.bin").write_bytes(b"half an upload")
    old = time.time() - 7200
    for path in (stale / "upload.bin", stale):
        os.utime(path, (old, old))
    blob = data / "artifacts" / "keep.bin"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"stored")
    create_app(_settings(f"sqlite:///{tmp_path / 'db.sqlite'}", data), enqueue=lambda j, q: None)
    assert not stale.exists()
    assert (fresh / "upload.bin").exists()
    assert blob.read_bytes() == b"stored"


# --- service wording --------------------------------------------------------------------------------


def test_messages_are_worded_for_the_service(api: str, tokens: dict[str, str], db_url: str, data_dir: Path) -> None:
    with client_for(api, tokens["team-a"]) as client:
        job_id = submit(client, EXAMPLE, "kind: op-present\nops: [Conv]\n").json()["id"]
        refused = client.post(f"/v1/jobs/{job_id}/retry")
        ctx = context_from_settings(WorkerSettings(database_url=db_url, data_dir=data_dir))
        run_job(job_id, ctx)
        ctx.db.dispose()
        failed = client.get(f"/v1/jobs/{job_id}").json()
        durations = [i["duration_s"] for i in client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]]
    assert durations and failed["progress"]["mean_check_s"] == pytest.approx(sum(durations) / len(durations), abs=1e-3)
    problem = _problem(refused, 409, f"Job '{job_id}' is queued;")
    assert "None" not in problem["detail"]
    assert failed["error"]["code"] == "original-did-not-fail", failed
    message = failed["error"]["message"]
    assert "check spec fails on the uploaded model" in message
    assert "--check" not in message and "--fail-code" not in message


def test_custom_domain_ops_are_accepted_at_intake(api: str, tokens: dict[str, str]) -> None:
    """Contrib and plugin ops are legitimate in real models; at run time an op the runtime lacks is
    the ``op-not-registered`` verdict (tests/checks/test_op_not_registered.py), never the failure.
    (A check that runs such a model on onnxruntime is refused at intake: tests/service/test_intake_ops.py.)"""
    model = _custom_op_model()
    with client_for(api, tokens["team-a"]) as client:
        response = submit(client, model.SerializeToString(), "kind: error\ntarget: {runtime: tensorrt}\n")
    assert response.status_code == 202, response.text

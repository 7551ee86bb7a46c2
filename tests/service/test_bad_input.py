"""Hostile or broken uploads: each answer is a 4xx problem+json saying what is wrong, and nothing
is left half-stored (no job row, no blob in the store, no job folder)."""

from __future__ import annotations

import base64
import io
import json
import tarfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from fastapi import FastAPI
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy import create_engine, text

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from persistence.db import normalize_url
from tests.service.conftest import client_for
from tests.service.helpers import OP_PRESENT_MUL, submit, tar_bundle

MAX_UPLOAD = 200_000


def _model(
    nodes: list[onnx.NodeProto], initializers: Sequence[onnx.TensorProto] = (), shape: Sequence[int] = (2, 2)
) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _external_weights_model(location: str) -> bytes:
    weight = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    return _model([helper.make_node("Mul", ["x", "w"], ["y"])], [weight])


def _bomb() -> bytes:
    weight = helper.make_tensor("w", TensorProto.FLOAT, [2, 2], b"\0" * 16, raw=True)
    weight.ClearField("dims")
    weight.dims.extend([1 << 30])  # declares 4 GiB, carries 16 bytes
    return _model([helper.make_node("Mul", ["x", "w"], ["y"])], [weight])


def _zip_with_symlink() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("model.onnx", _external_weights_model("w.bin"))
        info = zipfile.ZipInfo("w.bin")
        info.external_attr = 0o120777 << 16
        archive.writestr(info, "/etc/passwd")
    return buffer.getvalue()


EXAMPLE = build_example_model().SerializeToString()
CASES: dict[str, tuple[bytes, str, dict[str, str], int, str]] = {
    "not-onnx": (b"hello, this is not a model" * 10, OP_PRESENT_MUL, {}, 422, "not a readable ONNX model"),
    "truncated": (EXAMPLE[: len(EXAMPLE) // 2], OP_PRESENT_MUL, {}, 422, "ONNX"),
    "unknown-op": (_model([helper.make_node("FrobnicateX", ["x"], ["y"])]), OP_PRESENT_MUL, {}, 422, "FrobnicateX"),
    "cycle": (
        _model(
            [
                helper.make_node("Add", ["x", "b"], ["a"]),
                helper.make_node("Relu", ["a"], ["b"]),
                helper.make_node("Relu", ["a"], ["y"]),
            ]
        ),
        OP_PRESENT_MUL,
        {},
        422,
        "cycle",
    ),
    "dotdot-location": (
        tar_bundle({"model.onnx": _external_weights_model("../w.bin"), "w.bin": b"\0" * 16}),
        OP_PRESENT_MUL,
        {},
        422,
        "'..'",
    ),
    "absolute-location": (_external_weights_model("/etc/passwd"), OP_PRESENT_MUL, {}, 422, "absolute"),
    "dotdot-member": (tar_bundle({"../evil.onnx": EXAMPLE}), OP_PRESENT_MUL, {}, 422, "'..'"),
    "absolute-member": (tar_bundle({"/tmp/evil.onnx": EXAMPLE}), OP_PRESENT_MUL, {}, 422, "absolute"),
    "symlink-member": (
        tar_bundle({"model.onnx": _external_weights_model("w.bin")}, {"w.bin": ("/etc/passwd", tarfile.SYMTYPE)}),
        OP_PRESENT_MUL,
        {},
        422,
        "symlink",
    ),
    "hardlink-member": (
        tar_bundle({"model.onnx": _external_weights_model("w.bin")}, {"w.bin": ("model.onnx", tarfile.LNKTYPE)}),
        OP_PRESENT_MUL,
        {},
        422,
        "hardlink",
    ),
    "zip-symlink": (_zip_with_symlink(), OP_PRESENT_MUL, {}, 422, "symlink"),
    "tensor-bomb": (_bomb(), OP_PRESENT_MUL, {}, 422, "declares"),
    "input-shape-bomb": (
        _model([helper.make_node("Relu", ["x"], ["y"])], shape=[100_000, 100_000, 100]),
        OP_PRESENT_MUL,
        {},
        422,
        "declares shape",
    ),
    "too-large": (b"\0" * (MAX_UPLOAD + 10), OP_PRESENT_MUL, {}, 413, "MAX_UPLOAD_BYTES"),
    "bad-spec-kind": (EXAMPLE, "kind: nonsense\n", {}, 422, "kind"),
    "bad-spec-field": (EXAMPLE, "kind: op-present\nops: 7\n", {}, 422, "ops"),
    "command-check-disabled": (EXAMPLE, "kind: command\ncommand: [true]\n", {}, 422, "disabled"),
    "bad-mode": (EXAMPLE, OP_PRESENT_MUL, {"mode": "sideways"}, 422, "mode"),
    "missing-spec": (EXAMPLE, "", {}, 422, "check_spec"),
    "spec-with-nul": (EXAMPLE, "\x00kind: op-present\nops: [Mul]\n", {}, 422, "unacceptable character #x0000"),
    "spec-with-bel": (EXAMPLE, "kind: op-present\x07\nops: [Mul]\n", {}, 422, "unacceptable character #x0007"),
    "spec-with-fffe": (EXAMPLE, "\ufffekind: op-present\nops: [Mul]\n", {}, 422, "unacceptable character #xfffe"),
}


@pytest.fixture
def api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> Iterator[str]:
    queued: list[str] = []
    settings = ApiSettings(
        database_url=db_url, data_dir=data_dir, max_upload_bytes=MAX_UPLOAD, declared_bytes_floor=1 << 20
    )
    yield serve_app(create_app(settings, enqueue=lambda job_id, queue: queued.append(job_id)))


def _stored(db_url: str, data_dir: Path) -> tuple[int, list[Path]]:
    engine = create_engine(normalize_url(db_url))
    with engine.connect() as conn:
        jobs = int(conn.execute(text("SELECT count(*) FROM jobs")).scalar_one())
        jobs += int(conn.execute(text("SELECT count(*) FROM artifacts")).scalar_one())
    engine.dispose()
    leftovers = ("sha256", "jobs", "staging", "tmp")
    files = [p for p in data_dir.rglob("*") if p.is_file() and any(part in leftovers for part in p.parts)]
    return jobs, files


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_upload_is_a_problem_and_stores_nothing(
    case: str, api: str, tokens: dict[str, str], db_url: str, data_dir: Path
) -> None:
    body, spec, fields, status, words = CASES[case]
    with client_for(api, tokens["team-a"]) as client:
        response = submit(client, body, spec, filename="upload.bin", **fields)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == status and problem["title"]
    assert words.lower() in problem["detail"].lower(), problem
    assert _stored(db_url, data_dir) == (0, [])


def test_missing_or_wrong_token_is_401(api: str) -> None:
    assert httpx.get(api + "/v1/jobs").status_code == 401
    with client_for(api, "orx_not-a-token") as client:
        response = client.get("/v1/jobs")
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"] == "Bearer"


def test_a_valid_bundle_with_external_data_is_accepted(api: str, tokens: dict[str, str], data_dir: Path) -> None:
    bundle = tar_bundle({"m/model.onnx": _external_weights_model("w.bin"), "m/w.bin": np.ones(4, np.float32).tobytes()})
    with client_for(api, tokens["team-a"]) as client:
        response = submit(client, bundle, filename="bundle.tar", mode="bisect")
        assert response.status_code == 202, response.text
        again = submit(client, bundle, filename="bundle.tar")
        original = client.get(f"/v1/jobs/{response.json()['id']}/artifacts/original")
    assert again.json()["id"] != response.json()["id"]
    assert original.content == bundle


def test_idempotency_key_returns_the_same_job(api: str, tokens: dict[str, str]) -> None:
    with client_for(api, tokens["team-a"]) as client:
        headers = {"Idempotency-Key": "abc-123"}
        first = client.post(
            "/v1/jobs", headers=headers, files={"model": ("m.onnx", EXAMPLE)}, data={"check_spec": OP_PRESENT_MUL}
        )
        second = client.post(
            "/v1/jobs", headers=headers, files={"model": ("m.onnx", EXAMPLE)}, data={"check_spec": OP_PRESENT_MUL}
        )
        listed = client.get("/v1/jobs").json()["items"]
    assert first.status_code == second.status_code == 202
    assert first.json()["id"] == second.json()["id"]
    assert second.headers["idempotent-replayed"] == "true"
    assert len(listed) == 1


def test_confirm_flaky_is_kept_in_the_jobs_options_and_part_of_the_same_request(
    api: str, tokens: dict[str, str]
) -> None:
    """The form's ``confirm_flaky`` (on when left out) is stored with the other options and shown by
    ``GET /v1/jobs/{id}``; an Idempotency-Key reused with it changed is another request."""
    with client_for(api, tokens["team-a"]) as client:
        asked = submit(client, EXAMPLE, confirm_flaky="false", pin_signature="false", reduce_data="false")
        plain = submit(client, EXAMPLE)
        assert asked.status_code == plain.status_code == 202, (asked.text, plain.text)
        options = client.get(f"/v1/jobs/{asked.json()['id']}").json()["options"]
        default = client.get(f"/v1/jobs/{plain.json()['id']}").json()["options"]
        headers = {"Idempotency-Key": "flaky-1"}
        files, data = {"model": ("m.onnx", EXAMPLE)}, {"check_spec": OP_PRESENT_MUL}
        first = client.post("/v1/jobs", headers=headers, files=files, data=data | {"confirm_flaky": "0"})
        same = client.post("/v1/jobs", headers=headers, files=files, data=data | {"confirm_flaky": "false"})
        other = client.post("/v1/jobs", headers=headers, files=files, data=data)
        refused = submit(client, EXAMPLE, confirm_flaky="sometimes")
        person = submit(client, EXAMPLE, "kind: interactive\n")
        assert person.status_code == 202, person.text
        interactive = client.get(f"/v1/jobs/{person.json()['id']}").json()["options"]
    assert options == {
        "reduce_inputs": True,
        "reduce_outputs": True,
        "pin_signature": False,
        "confirm_flaky": False,
        "reduce_data": False,
    }
    assert default["confirm_flaky"] is True and default["pin_signature"] is True
    assert default["reduce_data"] is False  # the data step is opt-in
    assert interactive["confirm_flaky"] is False  # a person is not asked again unless the form says so
    assert first.status_code == same.status_code == 202 and first.json()["id"] == same.json()["id"]
    assert other.status_code == 422 and "Idempotency-Key" in other.json()["title"]
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "confirm_flaky"


# --- hostile ids and payloads: a 4xx naming what is wrong, never a 500 (issue 30 R3-R5) ---------

JOB_ROUTES = [
    ("GET", "/v1/jobs/{id}"),
    ("GET", "/v1/jobs/{id}/iterations"),
    ("GET", "/v1/jobs/{id}/events"),
    ("GET", "/v1/jobs/{id}/artifacts/min-bad"),
    ("GET", "/v1/jobs/{id}/bundle"),
    ("GET", "/v1/jobs/{id}/node-errors"),
    ("GET", "/v1/jobs/{id}/artifacts/min-bad/graph"),
    ("POST", "/v1/jobs/{id}/cancel"),
    ("POST", "/v1/jobs/{id}/retry"),
    ("DELETE", "/v1/jobs/{id}"),
]


@pytest.mark.parametrize("job_id", ["%00", "a%00b"])
def test_a_job_id_no_job_can_have_is_404_on_every_job_route(api: str, tokens: dict[str, str], job_id: str) -> None:
    with client_for(api, tokens["team-a"]) as client:
        answers = {
            f"{method} {route}": client.request(method, route.replace("{id}", job_id)) for method, route in JOB_ROUTES
        }
        answers["POST verdict"] = client.post(f"/v1/jobs/{job_id}/verdict", json={"iteration": 1, "verdict": "fail"})
    statuses = {route: response.status_code for route, response in answers.items()}
    assert statuses == dict.fromkeys(statuses, 404)
    for response in answers.values():
        assert response.headers["content-type"] == "application/problem+json"
        assert "was not found" in response.json()["detail"]


ZIP_LIKE = b"PK\x03\x04" + b"not a zip at all" * 4


def _json_array_payload(payload: bytes) -> bytes:
    """Polygraphy JSON (one feed dict) whose array ``x`` carries ``payload`` as its bytes."""
    array = base64.b64encode(payload).decode()
    return json.dumps([{"x": {"polygraphy_class": "ndarray", "array": array}}]).encode()


HOSTILE_TENSORS = {
    "nested-int-list": b'{"lst": [[1]]}',
    "nested-empty-list": b'{"lst": [[]]}',
    "pk-array-not-a-zip": _json_array_payload(ZIP_LIKE),
}


@pytest.mark.parametrize("field", ["inputs", "golden"])
@pytest.mark.parametrize("case", sorted(HOSTILE_TENSORS))
def test_hostile_tensor_uploads_are_a_422_naming_the_field(
    api: str, tokens: dict[str, str], db_url: str, data_dir: Path, field: str, case: str
) -> None:
    spec = "kind: golden\n" if field == "golden" else "kind: compare\ntarget: {runtime: onnxruntime, precision: fp16}\n"
    files = {"model": ("m.onnx", EXAMPLE), field: (f"{field}.bin", HOSTILE_TENSORS[case])}
    with client_for(api, tokens["team-a"]) as client:
        response = client.post("/v1/jobs", files=files, data={"check_spec": spec})
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["errors"][0]["field"] == field, problem
    assert "/" + "work" not in problem["detail"] and str(data_dir) not in problem["detail"]
    assert _stored(db_url, data_dir) == (0, [])


def test_a_spec_integer_of_thousands_of_digits_is_a_422(api: str, tokens: dict[str, str]) -> None:
    spec = "kind: op-present\nops: [Mul]\nrepeat: " + "9" * 5000 + "\n"
    with client_for(api, tokens["team-a"]) as client:
        response = submit(client, EXAMPLE, spec)
    assert response.status_code == 422, response.text
    assert "repeat: an integer of 5000 characters" in response.json()["detail"]

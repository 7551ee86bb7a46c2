"""Interactive jobs over real HTTP against PostgreSQL: a person's verdicts (here: a test that opens
every downloaded iteration model and answers ``fail`` when it still holds the Mul) reduce the
model to the same Mul an automatic op-present check finds; stale, repeated, racing, foreign and
malformed verdicts are refused with the right status; a cancel ends the job at once; the original
answered ``pass`` ends the job saying so. No worker runs: the runner is never handed these jobs."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
from fastapi import FastAPI
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy import select

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from persistence.db import Database
from persistence.models import CheckUnit
from persistence.repositories.units import UnitRepository
from tests.service.conftest import client_for
from tests.service.helpers import chain_model, read_sse, submit, wait_job

INTERACTIVE = "kind: interactive\n"
EXAMPLE = build_example_model().SerializeToString()


class RefusingRunner:
    """The api's runner: interactive jobs must never reach it."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def __call__(self, job_id: str, queue: str) -> None:
        self.sent.append(job_id)


@pytest.fixture
def runner() -> RefusingRunner:
    return RefusingRunner()


@pytest.fixture
def api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str], runner: RefusingRunner) -> str:
    settings = ApiSettings(database_url=db_url, redis_url=None, data_dir=data_dir)
    return serve_app(create_app(settings, enqueue=runner))


@pytest.fixture
def client(api: str, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with client_for(api, tokens["team-a"]) as client:
        yield client


def _model_of(response: httpx.Response) -> onnx.ModelProto:
    """The iteration model of a download (a tar with its weight files, or the plain model)."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"] == "application/x-tar":
        with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith(".onnx"))
            data = tar.extractfile(member)
            assert data is not None
            return onnx.load_model_from_string(data.read())
    return onnx.load_model_from_string(response.content)


def _judge(client: httpx.Client, awaiting: dict[str, Any]) -> str:
    """What the person answers: the downloaded model fails when it still computes a Mul."""
    model = _model_of(client.get(awaiting["artifact"]))
    assert len(model.graph.node) == awaiting["nodes"]
    return "fail" if any(node.op_type == "Mul" for node in model.graph.node) else "pass"


def _reduce_by_hand(client: httpx.Client, job_id: str, limit: int = 200) -> dict[str, Any]:
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
    for _ in range(limit):
        if job["status"] != "running":
            return job
        awaiting = job["awaiting_verdict"]
        verdict = _judge(client, awaiting)
        response = client.post(
            f"/v1/jobs/{job_id}/verdict", json={"iteration": awaiting["iteration"], "verdict": verdict}
        )
        assert response.status_code == 200, response.text
        job = response.json()
    raise AssertionError(f"job {job_id} still runs after {limit} verdicts")


def _start(client: httpx.Client, model: bytes = EXAMPLE) -> dict[str, Any]:
    created = submit(client, model, INTERACTIVE)
    assert created.status_code == 202, created.text
    assert created.json()["status"] == "running"
    job: dict[str, Any] = client.get(created.headers["Location"]).json()
    return job


def test_verdicts_reduce_the_model_like_an_automatic_check(client: httpx.Client, runner: RefusingRunner) -> None:
    model = chain_model(12, mul_at=7).SerializeToString()
    job = _start(client, model)
    assert job["check_kind"] == "interactive" and job["queue"] == "interactive"
    first = job["awaiting_verdict"]
    assert first["iteration"] == 1 and first["phase"] == "original" and first["nodes"] == 12
    assert first["artifact"] == f"/v1/jobs/{job['id']}/artifacts/iteration-1"

    done = _reduce_by_hand(client, job["id"])
    assert done["status"] == "succeeded" and done["awaiting_verdict"] is None
    assert done["nodes_after"] == 1 and done["nodes_before"] == 12
    min_bad = _model_of(client.get(f"/v1/jobs/{job['id']}/artifacts/min-bad"))
    assert [n.name for n in min_bad.graph.node] == ["n7_Mul"]
    min_good = _model_of(client.get(f"/v1/jobs/{job['id']}/artifacts/min-good"))
    assert "Mul" not in {n.op_type for n in min_good.graph.node}
    iterations = client.get(f"/v1/jobs/{job['id']}/iterations").json()["items"]
    assert iterations and all(not i["pending"] for i in iterations)
    assert done["progress"]["checks_run"] == len(iterations)
    assert {i["verdict"] for i in iterations} == {"fail", "pass"}
    assert all(i["reproduces"] == (i["verdict"] == "fail") for i in iterations)
    events = list(read_sse(client, f"/v1/jobs/{job['id']}/events", stop=lambda e: e.kind == "job.succeeded"))
    asked = [e.data["iteration"] for e in events if e.kind == "verdict.needed"]
    answered = [e.data["number"] for e in events if e.kind == "iteration"]
    assert asked == answered == [i["number"] for i in iterations]
    assert runner.sent == []  # no worker was asked to run it

    automatic = submit(client, model, "kind: op-present\nops: [Mul]\n").json()["id"]
    assert runner.sent == [automatic]


def test_stale_repeated_foreign_and_malformed_verdicts(client: httpx.Client, api: str, tokens: dict[str, str]) -> None:
    job = _start(client)
    url = f"/v1/jobs/{job['id']}/verdict"
    ahead = client.post(url, json={"iteration": 2, "verdict": "fail"})
    assert ahead.status_code == 409 and "it awaits iteration 1" in ahead.json()["detail"]
    for bad in ({"iteration": 1, "verdict": "maybe"}, {"iteration": 0, "verdict": "fail"}, {"verdict": "fail"}):
        assert client.post(url, json=bad).status_code == 422
    with client_for(api, tokens["team-b"]) as other:
        assert other.post(url, json={"iteration": 1, "verdict": "fail"}).status_code == 404

    assert client.post(url, json={"iteration": 1, "verdict": "fail"}).status_code == 200
    again = client.post(url, json={"iteration": 1, "verdict": "fail"})
    assert again.status_code == 409 and again.json()["title"] == "Stale verdict"
    assert client.get(f"/v1/jobs/{job['id']}").json()["awaiting_verdict"]["iteration"] == 2

    automatic = submit(client, EXAMPLE).json()["id"]
    refused = client.post(f"/v1/jobs/{automatic}/verdict", json={"iteration": 1, "verdict": "fail"})
    assert refused.status_code == 409 and "kind: interactive" in refused.json()["detail"]


def test_two_answers_at_once_one_wins(client: httpx.Client) -> None:
    job = _start(client)
    url = f"/v1/jobs/{job['id']}/verdict"
    with ThreadPoolExecutor(4) as pool:
        codes = sorted(
            pool.map(lambda _: client.post(url, json={"iteration": 1, "verdict": "fail"}).status_code, range(4))
        )
    assert codes == [200, 409, 409, 409]
    iterations = client.get(f"/v1/jobs/{job['id']}/iterations").json()["items"]
    assert [(i["number"], i["pending"]) for i in iterations] == [(1, False), (2, True)]


def test_each_question_is_a_check_unit_the_verdict_route_answers(client: httpx.Client, db_url: str) -> None:
    """The check a person is asked about is a check unit (``asked``: no worker takes it, nor does it
    count as a running check); the verdict route finishes it as a worker finishes its unit (it
    takes the iteration's number), and a cancel cancels the one asked next."""
    job = _start(client)
    db = Database(db_url)

    def units() -> list[str]:
        with db.session() as session:
            query = select(CheckUnit.status).where(CheckUnit.job_id == job["id"]).order_by(CheckUnit.id)
            return list(session.scalars(query))

    try:
        assert units() == ["asked"]
        with db.session() as session:
            assert UnitRepository(session).available_work(["interactive"], 3) == []
            assert UnitRepository(session).running_count(job["id"]) == 0
        assert client.post(f"/v1/jobs/{job['id']}/verdict", json={"iteration": 1, "verdict": "fail"}).status_code == 200
        assert units() == ["done", "asked"]
        with db.session() as session:
            done = session.scalars(select(CheckUnit).where(CheckUnit.status == "done")).one()
            assert done.job_id == job["id"] and done.number == 1
        assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 200
        assert units() == ["done", "cancelled"]
    finally:
        db.dispose()


def test_cancel_ends_it_at_once_and_it_is_never_retried(client: httpx.Client) -> None:
    job = _start(client)
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["awaiting_verdict"] is None
    late = client.post(f"/v1/jobs/{job['id']}/verdict", json={"iteration": 1, "verdict": "fail"})
    assert late.status_code == 409 and "cancelled" in late.json()["detail"]
    retried = client.post(f"/v1/jobs/{job['id']}/retry")
    assert retried.status_code == 409 and "is interactive" in retried.json()["detail"]


def test_an_original_that_passes_ends_the_job(client: httpx.Client) -> None:
    job = _start(client)
    client.post(f"/v1/jobs/{job['id']}/verdict", json={"iteration": 1, "verdict": "pass"})
    ended = wait_job(client, job["id"], timeout=60)
    assert ended["status"] == "failed" and ended["error"]["code"] == "original-did-not-fail"
    assert "answer 'It fails'" in ended["error"]["message"]


def test_an_interactive_spec_takes_no_other_field_nor_golden_values(client: httpx.Client) -> None:
    extra = submit(client, EXAMPLE, "kind: interactive\ntimeout: 5\n")
    assert extra.status_code == 422 and "takes no other field" in extra.json()["detail"]
    golden = client.post(
        "/v1/jobs",
        files={"model": ("model.onnx", EXAMPLE), "golden": ("g.json", b"[]")},
        data={"check_spec": INTERACTIVE},
    )
    assert golden.status_code == 422 and "uses no golden values" in golden.json()["detail"]


def _weighted_model() -> bytes:
    """x + W1 -> * W2 -> Relu -> y, with 4 KiB weights (moved out of the graph by the reducer)."""
    weights = [numpy_helper.from_array(np.full((1024,), i + 1.0, "float32"), f"W{i + 1}") for i in range(2)]
    nodes = [
        helper.make_node("Add", ["x", "W1"], ["a"], name="add"),
        helper.make_node("Mul", ["a", "W2"], ["m"], name="mul"),
        helper.make_node("Relu", ["m"], ["y"], name="relu"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024])
    model = helper.make_model(helper.make_graph(nodes, "weighted", [x], [y], weights))
    model.opset_import[0].version = 17
    model.ir_version = 8
    return model.SerializeToString()


def test_iteration_models_come_with_their_weights(client: httpx.Client) -> None:
    job = _start(client, _weighted_model())
    first = client.get(job["awaiting_verdict"]["artifact"])
    assert first.headers["content-type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(first.content)) as tar:
        names = tar.getnames()
    assert any(n.endswith(".onnx") for n in names) and len(names) >= 2, names
    done = _reduce_by_hand(client, job["id"])
    assert done["status"] == "succeeded" and done["nodes_after"] == 1
    min_bad = _model_of(client.get(f"/v1/jobs/{job['id']}/artifacts/min-bad"))
    assert [n.op_type for n in min_bad.graph.node] == ["Mul"]
    assert numpy_helper.to_array(next(i for i in min_bad.graph.initializer if i.name == "W2"))[0] == 2.0

"""What the api adds for the web page, over real HTTP against PostgreSQL with the in-process
runner (the same ``run_job`` as a Celery worker): the graph JSON of a stored model, the best model
so far of a job that ended early, problems that name their form field, ``GET /v1/me``, and
``/docs`` / ``/redoc`` served from local assets."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import onnx
import pytest
from fastapi import FastAPI

from api.app import create_app
from api.routes.graphs import MAX_NODES_LIMIT, cached_graph
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from tests.service.conftest import client_for
from tests.service.helpers import OP_PRESENT_MUL, chain_model, submit, tar_bundle, wait_job
from worker.context import context_from_settings
from worker.local import LocalRunner
from worker.settings import WorkerSettings

EXAMPLE = build_example_model().SerializeToString()


@pytest.fixture
def api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> Iterator[str]:
    worker = WorkerSettings(database_url=db_url, redis_url=None, data_dir=data_dir, allow_command_checks=True)
    runner = LocalRunner(context_from_settings(worker)).start()
    settings = ApiSettings(database_url=db_url, redis_url=None, data_dir=data_dir, allow_command_checks=True)
    yield serve_app(create_app(settings, enqueue=runner))
    runner.stop()


@pytest.fixture
def client(api: str, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with client_for(api, tokens["team-a"]) as client:
        yield client


def _finished_example(client: httpx.Client) -> str:
    job_id: str = submit(client, EXAMPLE).json()["id"]
    assert wait_job(client, job_id)["status"] == "succeeded"
    return job_id


def test_the_graph_of_min_bad_min_good_and_an_iteration(client: httpx.Client, api: str, tokens: dict[str, str]) -> None:
    job_id = _finished_example(client)
    bad = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad/graph").json()
    assert [(n["id"], n["op"]) for n in bad["nodes"]] == [("onnx_graphsurgeon_node_5", "Mul")]
    assert bad["node_count"] == 1 and bad["truncated"] is False and bad["op_histogram"] == {"Mul": 1}
    mul = bad["nodes"][0]
    assert mul["inputs"] == ["add_out", "x2"] and mul["outputs"] == ["mul_out"]
    # the data step is opt-in (reduce_data): the answer keeps the example's 2 x 2 inputs
    assert bad["tensors"]["add_out"] == {"dtype": "float32", "shape": [1, 1, 2, 2]}
    assert {v["name"] for v in bad["inputs"]} == {"add_out", "x2"}
    assert [v["name"] for v in bad["outputs"]] == ["mul_out"]

    good = client.get(f"/v1/jobs/{job_id}/artifacts/min-good/graph").json()
    assert "Mul" not in good["op_histogram"] and good["node_count"] == len(good["nodes"])

    original = client.get(f"/v1/jobs/{job_id}/artifacts/original/graph").json()
    assert original["node_count"] == 5 and [n["op"] for n in original["nodes"]][2] == "Mul"
    assert original["tensors"]["sub_out"] == {"dtype": "float32", "shape": [1, 1, 2, 2]}  # inferred
    first = client.get(f"/v1/jobs/{job_id}/artifacts/iteration-1/graph").json()
    assert first["node_count"] == client.get(f"/v1/jobs/{job_id}/iterations").json()["items"][0]["nodes"]

    with client_for(api, tokens["team-b"]) as other:
        assert other.get(f"/v1/jobs/{job_id}/artifacts/min-bad/graph").status_code == 404
    missing = client.get(f"/v1/jobs/{job_id}/artifacts/iteration-999/graph")
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"


def test_a_large_graph_comes_as_a_summary(client: httpx.Client) -> None:
    job_id = _finished_example(client)
    summary = client.get(f"/v1/jobs/{job_id}/artifacts/original/graph", params={"max_nodes": 3}).json()
    assert summary["truncated"] is True and summary["nodes"] == [] and summary["tensors"] == {}
    assert summary["node_count"] == 5
    assert summary["op_histogram"] == {"Identity": 2, "Add": 1, "Mul": 1, "Sub": 1}
    assert [v["name"] for v in summary["inputs"]] == ["x0", "x1", "x2", "x3"]


def test_the_original_is_drawn_up_to_20000_nodes_and_cached_within_its_team(
    client: httpx.Client, api: str, tokens: dict[str, str]
) -> None:
    """The page asks for the original with max_nodes=20000 each time a job opens: the second
    answer comes from the cache (same body), another team still gets 404, and past the limit a 422."""
    job_id = _finished_example(client)
    url = f"/v1/jobs/{job_id}/artifacts/original/graph"
    before = cached_graph.cache_info()
    first = client.get(url, params={"max_nodes": MAX_NODES_LIMIT})
    second = client.get(url, params={"max_nodes": MAX_NODES_LIMIT})
    assert first.status_code == second.status_code == 200 and first.json() == second.json()
    assert first.json()["node_count"] == 5 and len(first.json()["nodes"]) == 5
    after = cached_graph.cache_info()
    assert after.hits - before.hits == 1 and after.misses - before.misses == 1
    with client_for(api, tokens["team-b"]) as other:
        assert other.get(url, params={"max_nodes": MAX_NODES_LIMIT}).status_code == 404
    assert client.get(url, params={"max_nodes": MAX_NODES_LIMIT + 1}).status_code == 422


def test_the_graph_of_an_uploaded_bundle_is_read_from_its_model(client: httpx.Client) -> None:
    bundle = tar_bundle({"nested/model.onnx": EXAMPLE, "nested/readme.txt": b"hello"})
    job_id = submit(client, bundle, filename="bundle.tar").json()["id"]
    wait_job(client, job_id)
    graph = client.get(f"/v1/jobs/{job_id}/artifacts/original/graph").json()
    assert graph["node_count"] == 5 and graph["nodes"][0]["op"] == "Identity"


def _wait(condition: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)
    return value


def test_a_cancelled_job_offers_its_best_model_so_far(client: httpx.Client) -> None:
    """Each check sleeps; after a few smaller failing candidates the job is cancelled: its min-bad is
    the smallest iteration model that reproduced the failure."""
    spec = "kind: command\ncommand: [sh, -c, 'sleep 0.3; if grep -q Mul \"$1\"; then exit 1; fi', sh, '{model}']\n"
    job_id = submit(client, chain_model(24, 15).SerializeToString(), spec, mode="linear").json()["id"]
    assert client.get(f"/v1/jobs/{job_id}/artifacts/min-bad").status_code == 404  # nothing yet

    def reproduced() -> list[dict[str, Any]]:
        items = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
        return [i for i in items if i["reproduces"] and i["nodes"] < 24]

    _wait(reproduced)
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code in (200, 202)
    assert wait_job(client, job_id)["status"] == "cancelled"
    items = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
    # a check still running at the cancel may land afterwards: it is recorded as a late iteration,
    # never the answer (the answer is the best the job had when it ended)
    best = min((i for i in items if i["reproduces"] and not i["late"]), key=lambda i: (i["nodes"], i["number"]))
    answer = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad")
    assert answer.status_code == 200
    assert f"{job_id}-min-bad-iteration-{best['number']}.onnx" in answer.headers["content-disposition"]
    assert answer.content == client.get(f"/v1/jobs/{job_id}/artifacts/iteration-{best['number']}").content
    assert len(onnx.load_from_string(answer.content).graph.node) == best["nodes"] < 24
    graph = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad/graph").json()
    assert graph["node_count"] == best["nodes"] and "Mul" in graph["op_histogram"]
    assert client.get(f"/v1/jobs/{job_id}/artifacts/min-good").status_code == 404


@pytest.mark.parametrize(
    ("model", "fields", "field"),
    [
        (EXAMPLE, {"check_spec": "kind: op-present\nops: []"}, "check_spec"),
        (EXAMPLE, {"check_spec": "kind: golden\ntarget: {runtime: onnxruntime}"}, "golden"),
        (EXAMPLE, {"check_spec": OP_PRESENT_MUL, "mode": "fastest"}, "mode"),
        (EXAMPLE, {"check_spec": OP_PRESENT_MUL, "reduce_inputs": "maybe"}, "reduce_inputs"),
        (b"not a model", {"check_spec": OP_PRESENT_MUL}, "model"),
    ],
)
def test_a_problem_names_the_form_field_it_concerns(
    client: httpx.Client, model: bytes, fields: dict[str, str], field: str
) -> None:
    answer = client.post("/v1/jobs", files={"model": ("model.onnx", model)}, data=fields)
    assert answer.status_code == 422 and answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["errors"] == [{"field": field, "message": problem["detail"]}]


def test_a_bundle_with_two_models_points_at_model_path(client: httpx.Client) -> None:
    bundle = tar_bundle({"a.onnx": EXAMPLE, "b.onnx": EXAMPLE})
    problem = submit(client, bundle, filename="bundle.tar").json()
    assert problem["errors"][0]["field"] == "model_path" and "model_path" in problem["detail"]


def test_me_names_the_team_and_the_server_limits(client: httpx.Client, api: str) -> None:
    me = client.get("/v1/me").json()
    assert me == {"team": "team-a", "server": {"allow_command_checks": True, "max_upload_bytes": 2 * 1024**3}}
    refused = httpx.get(api + "/v1/me", headers={"Authorization": "Bearer nope"})
    assert refused.status_code == 401 and refused.headers["content-type"] == "application/problem+json"


def test_the_api_docs_load_only_local_assets(api: str) -> None:
    for page in ("/docs", "/redoc"):
        html = httpx.get(api + page).text
        urls = re.findall(r"""(?:src|href)=["']([^"']+)""", html) + re.findall(r"url: ?'([^']+)'", html)
        assert urls and all(url.startswith("/") for url in urls), (page, urls)
        for url in urls:
            assert httpx.get(api + url).status_code == 200, url
    assert "SwaggerUIBundle" in httpx.get(api + "/docs-assets/swagger-ui-bundle.js").text[:5000]

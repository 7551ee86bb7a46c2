"""What a new user trips on with the service's API (issue 20), against the embedded default (SQLite,
in-process runner) over real HTTP: wording of refusals, what a cancelled job offers, and the OpenAPI
document."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import onnx
import pytest

from examples.build_example_model import build_example_model
from reducer_cli.main import run
from tests.service.conftest import client_for
from tests.service.helpers import chain_model, submit, wait_job
from tests.service.web_harness import Service

EXAMPLE = build_example_model().SerializeToString()


def test_refusing_to_retry_a_succeeded_job_says_it_in_words(service: Service) -> None:
    with client_for(service.url, service.token) as client:
        job_id = submit(client, EXAMPLE).json()["id"]
        assert wait_job(client, job_id)["status"] == "succeeded"
        refused = client.post(f"/v1/jobs/{job_id}/retry")
    assert refused.status_code == 409
    assert refused.json()["detail"].startswith(f"Job '{job_id}' has succeeded; only jobs that failed")


@pytest.mark.parametrize("filename", ["report.pdf", "my model (1).onnx"])
def test_a_refused_upload_is_named_as_uploaded(service: Service, filename: str) -> None:
    with client_for(service.url, service.token) as client:
        refused = submit(client, b"%PDF-1.7 not a model", filename=filename)
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["detail"].startswith(f"'{filename}' is not a readable ONNX model"), problem["detail"]
    assert problem["errors"] == [{"field": "model", "message": problem["detail"]}]
    assert ".pdf.onnx" not in refused.text and "mymodel1" not in refused.text


def test_spec_mistakes_suggest_the_field_and_list_every_kind(service: Service) -> None:
    with client_for(service.url, service.token) as client:
        misspelled = submit(client, EXAMPLE, "kind: op-present\nop: [Mul]\n").json()
        unknown_kind = submit(client, EXAMPLE, "kind: comparee\n").json()
    assert misspelled["detail"].startswith("op: unknown field for kind 'op-present'; did you mean 'ops'? (allowed: ")
    assert misspelled["errors"][0]["field"] == "check_spec"
    assert unknown_kind["detail"] == (
        "kind: must be one of compare, golden, error, op-present, command, or interactive (the service: a person "
        "judges each model), got 'comparee'; did you mean 'compare'?"
    )


def test_the_check_spec_guide_is_served_by_the_app(service: Service) -> None:
    page = httpx.get(f"{service.url}/guide/check-specs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<table>" in page.text and "<h2>" in page.text and "op-present" in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert httpx.get(f"{service.url}/guide/architecture").status_code == 404  # only the user guides
    assert httpx.get(f"{service.url}/guide/..%2FREADME").status_code == 404


SLOW_SPEC = json.dumps(
    {"kind": "command", "command": ["sh", "-c", 'sleep 0.5; if grep -q Mul "$1"; then exit 1; fi', "sh", "{model}"]}
)


def test_download_of_a_cancelled_job_writes_its_best_model(
    service: Service, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with client_for(service.url, service.token) as client:
        job_id = submit(client, chain_model(24, 15).SerializeToString(), SLOW_SPEC, mode="linear").json()["id"]
        deadline = time.monotonic() + 120
        while (client.get(f"/v1/jobs/{job_id}").json()["progress"]["best_size"] or 24) >= 24:
            assert time.monotonic() < deadline, "no smaller failing model"
            time.sleep(0.2)
        client.post(f"/v1/jobs/{job_id}/cancel")
        job = wait_job(client, job_id)
    assert job["status"] == "cancelled"
    argv = ["download", job_id, "-o", str(tmp_path), "--server", service.url, "--token", service.token]
    assert run(argv) == 0
    written = list(tmp_path.iterdir())
    assert len(written) == 1
    nodes = len(onnx.load(str(written[0])).graph.node)
    assert nodes == job["progress"]["best_size"] < 24
    assert (
        f"job {job_id} was cancelled: {written[0]} is its best model so far ({nodes} nodes)" in capsys.readouterr().err
    )


def test_openapi_documents_the_problem_answers(service: Service) -> None:
    schema = httpx.get(f"{service.url}/openapi.json").json()
    problem = schema["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail"}

    def documented(method: str, path: str) -> dict[str, str]:
        responses = schema["paths"][path][method]["responses"]
        return {
            code: answer["content"]["application/problem+json"]["schema"]["$ref"]
            for code, answer in responses.items()
            if "application/problem+json" in answer.get("content", {})
        }

    ref = "#/components/schemas/Problem"
    assert documented("post", "/v1/jobs") == dict.fromkeys(["400", "401", "413", "415", "422", "503"], ref)
    assert documented("get", "/v1/jobs/{job_id}") == dict.fromkeys(["401", "404", "422", "503"], ref)
    assert documented("post", "/v1/jobs/{job_id}/cancel") == dict.fromkeys(["401", "404", "409", "422", "503"], ref)
    assert set(documented("get", "/v1/me")) == {"401", "422", "503"}
    # what it documents is what the api answers
    with client_for(service.url, service.token) as client:
        missing = client.get("/v1/jobs/0123456789abcdef")
    anonymous = httpx.get(f"{service.url}/v1/jobs")
    for answer, status in ((missing, 404), (anonymous, 401)):
        assert answer.status_code == status and answer.headers["content-type"] == "application/problem+json"
        assert set(problem["required"]) <= set(answer.json())


def test_each_embedded_slot_shows_its_own_check(service: Service) -> None:
    """The checks in flight name the slot that runs them, and no two slots show the same check (the
    slots once claimed checks under one shared name that matched neither)."""
    with client_for(service.url, service.token) as client:
        job_id = submit(client, chain_model(24, 15).SerializeToString(), SLOW_SPEC, mode="linear").json()["id"]
        names = {w["name"] for w in client.get("/v1/workers").json()["items"]}
        assert len(names) == 2  # LOCAL_WORKERS=2: two slots
        seen = 0
        deadline = time.monotonic() + 120
        while seen < 5:
            assert time.monotonic() < deadline, "no check seen in flight"
            flights = client.get(f"/v1/jobs/{job_id}").json()["checks_in_flight"]
            workers = client.get("/v1/workers").json()["items"]
            shown = [(w["name"], w["job"]["check"]) for w in workers if w["job"] and w["job"]["check"]]
            if not flights:
                time.sleep(0.1)
                continue
            seen += 1
            assert {f["worker"] for f in flights} <= names, (flights, names)
            iterations = [check["iteration"] for _, check in shown]
            assert len(iterations) == len(set(iterations)), shown
        client.post(f"/v1/jobs/{job_id}/cancel")
        assert wait_job(client, job_id)["status"] == "cancelled"

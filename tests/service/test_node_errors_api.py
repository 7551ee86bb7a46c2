"""``GET /v1/jobs/{id}/node-errors`` end to end (PostgreSQL, Redis, a Celery worker): a compare
job's localisation step measures every tensor's error, the worker stores them, the api gives them
to the job's team only (404 problem for another team, and for a check kind that measures none),
and a second job on the same model and check, localised from the farm's shared layerwise result
without running it, has them too. The route and its schema are in the OpenAPI document."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import func, select

from persistence.db import Database
from persistence.models import CheckUnit
from tests.checks.conftest import COMPARE_FP16
from tests.checks.models import chain_model
from tests.service.conftest import Processes, client_for
from tests.service.helpers import wait_job

FAULT_AT = 23
MODEL = chain_model(40, fault_at=FAULT_AT).SerializeToString()


def _submit(client: httpx.Client, spec: str) -> str:
    answer = client.post("/v1/jobs", files={"model": ("chain.onnx", MODEL)}, data={"check_spec": spec})
    assert answer.status_code == 202, answer.text
    job_id: str = answer.json()["id"]
    return job_id


def _culprit_first(errors: dict[str, Any]) -> None:
    tensors = errors["tensors"]
    assert errors["total"] == len(tensors) == 41 and errors["truncated"] is False
    first_bad = next(i for i, e in enumerate(tensors) if e["nonfinite"])
    culprit = tensors[first_bad]
    assert (culprit["tensor"], culprit["node"], culprit["op"]) == (f"t{FAULT_AT}", f"n{FAULT_AT}_overflow", "Mul")
    assert culprit["max_abs"] is None and culprit["beyond"] is True
    before = tensors[:first_bad]
    assert len(before) == FAULT_AT and all(isinstance(e["max_abs"], float) for e in before)
    assert max(e["max_rel"] for e in before) < 0.01


def _layerwise_runs(db_url: str, job_id: str) -> int:
    database = Database(db_url)
    try:
        with database.session() as session:
            query = select(func.count()).where(CheckUnit.job_id == job_id, CheckUnit.kind == "layerwise")
            return int(session.scalar(query) or 0)
    finally:
        database.dispose()


def test_a_compare_job_gives_its_node_errors_to_its_team_only(
    api_url: str, processes: Processes, tokens: dict[str, str], db_url: str
) -> None:
    processes.worker()
    with client_for(api_url, tokens["team-a"]) as client:
        compare = _submit(client, COMPARE_FP16)
        op_present = _submit(client, "kind: op-present\nops: [Mul]")
        assert wait_job(client, compare, timeout=300)["status"] == "succeeded"
        again = _submit(client, COMPARE_FP16)  # the farm has the first job's layerwise result now
        assert wait_job(client, op_present, timeout=300)["status"] == "succeeded"
        second = wait_job(client, again, timeout=300)
        assert second["status"] == "succeeded"
        errors = client.get(f"/v1/jobs/{compare}/node-errors")
        from_farm = client.get(f"/v1/jobs/{again}/node-errors")
        none = client.get(f"/v1/jobs/{op_present}/node-errors")
        document = client.get("/openapi.json").json()
    with client_for(api_url, tokens["team-b"]) as other:
        foreign = other.get(f"/v1/jobs/{compare}/node-errors")

    assert errors.status_code == 200, errors.text
    _culprit_first(errors.json())
    assert (_layerwise_runs(db_url, compare), _layerwise_runs(db_url, again)) == (1, 0)  # the second: the farm's
    assert from_farm.status_code == 200, from_farm.text
    assert from_farm.json() == errors.json()
    assert none.status_code == 404 and none.headers["content-type"] == "application/problem+json"
    assert "only compare and golden jobs" in none.json()["detail"]
    assert foreign.status_code == 404 and foreign.headers["content-type"] == "application/problem+json"
    assert "Job '" in foreign.json()["detail"]

    operation = document["paths"]["/v1/jobs/{job_id}/node-errors"]["get"]
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert schema.endswith("/NodeErrorsOut")
    assert "404" in operation["responses"] and "401" in operation["responses"]
    fields = document["components"]["schemas"]["TensorErrorOut"]["properties"]
    assert {"tensor", "node", "op", "max_abs", "max_rel", "nonfinite", "beyond"} <= set(fields)

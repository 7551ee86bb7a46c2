"""``task: precision`` jobs over the embedded service (real HTTP, the in-process runner): what a job
reports is what it wrote. By default the answer grows until no fp16 tensor of the written model
holds inf, and ``nodes_after`` counts the nodes that model keeps in fp32; the ``allow_nonfinite``
option (the CLI's ``precision --allow-nonfinite``, the client's ``submit --allow-nonfinite``)
keeps the search's answer (issue 26)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.precision_models import COMPARE_GELU, GELU_FINITE_KEEP, GELU_KEEP, gelu_overflow
from tests.service.conftest import client_for
from tests.service.helpers import submit, wait_job
from tests.service.web_harness import Service

GELU = gelu_overflow().SerializeToString()


def _precision_job(client: httpx.Client, **fields: str) -> dict[str, Any]:
    response = submit(client, GELU, COMPARE_GELU, "gelu.onnx", task="precision", **fields)
    assert response.status_code == 202, response.text
    job = wait_job(client, response.json()["id"], timeout=600)
    assert job["status"] == "succeeded", job
    return job


def test_nodes_after_counts_the_fp32_nodes_of_the_written_model(service: Service) -> None:
    """The BERT-like block: the search answers 4 nodes, the written model keeps 6 in fp32 (no inf in
    any fp16 tensor); ``nodes_after`` says 6, as ``keep_fp32`` does (before: the search's 4)."""
    with client_for(service.url, service.token) as client:
        job = _precision_job(client)
    assert sorted(job["keep_fp32"]) == sorted(GELU_FINITE_KEEP)
    assert job["nodes_after"] == len(GELU_FINITE_KEEP) == 6
    assert "allow_nonfinite" not in job["options"]


def test_allow_nonfinite_keeps_the_search_answer(service: Service) -> None:
    """``allow_nonfinite=true``: the 4 nodes the search answered, inf in fp16 tensors or not; the
    option is stored with the job (before: the field was ignored and the answer had 6 nodes)."""
    with client_for(service.url, service.token) as client:
        job = _precision_job(client, allow_nonfinite="true")
    assert sorted(job["keep_fp32"]) == sorted(GELU_KEEP)
    assert job["nodes_after"] == len(GELU_KEEP) == 4
    assert job["options"]["allow_nonfinite"] is True


def test_allow_nonfinite_is_refused_for_another_task_or_value(service: Service) -> None:
    """A 422 naming the field: the option means nothing to a reduction, and takes true or false."""
    with client_for(service.url, service.token) as client:
        reduction = submit(client, GELU, COMPARE_GELU, "gelu.onnx", allow_nonfinite="true")
        odd = submit(client, GELU, COMPARE_GELU, "gelu.onnx", task="precision", allow_nonfinite="maybe")
    assert reduction.status_code == 422 and "task precision only" in reduction.json()["detail"], reduction.text
    assert odd.status_code == 422 and "true or false" in odd.json()["detail"], odd.text

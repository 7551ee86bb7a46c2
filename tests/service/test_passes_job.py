"""``task: bisect-passes`` jobs on the embedded service (``onnx-reducer serve``): the upload form's
``task`` field (the spec must run the model on a target), every probe a real check run by the
server's worker slot and kept as an iteration, the answer in ``GET /v1/jobs/{id}`` (``passes``)
and in ``onnx-reducer submit --task bisect-passes --wait --json``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.pass_models import FUSED_MATMUL_FUSION, fusion_model, optimized_op_spec
from tests.service.conftest import client_for
from tests.service.embedded import embedded_server
from tests.service.helpers import run_captured, submit, wait_job

pytest.importorskip("onnxruntime")
MODEL = fusion_model().SerializeToString()


@pytest.mark.slow
def test_a_bisect_passes_job_names_the_fusion_verified_both_ways(tmp_path: Path) -> None:
    (tmp_path / "fusions.onnx").write_bytes(MODEL)
    (tmp_path / "matmul.yaml").write_text(optimized_op_spec("MatMul"))
    with embedded_server(tmp_path) as server:
        with client_for(server.url, server.token) as client:
            created = submit(client, MODEL, optimized_op_spec("FusedMatMul"), "fusions.onnx", task="bisect-passes")
            assert created.status_code == 202, created.text
            job = wait_job(client, created.json()["id"], timeout=300)
            iterations = client.get(f"/v1/jobs/{job['id']}/iterations").json()["items"]
            refused = submit(client, MODEL, "kind: op-present\nops: [MatMul]\n", task="bisect-passes")
        command = ["onnx-reducer", "submit", "fusions.onnx", "--check-spec", "matmul.yaml", "--task", "bisect-passes"]
        env = {**server.env, "ONNX_REDUCER_SERVER": server.url, "ONNX_REDUCER_TOKEN": server.token}
        done = run_captured([*command, "--wait", "--json"], env, cwd=tmp_path)

    assert job["status"] == "succeeded", job
    assert job["task"] == "bisect-passes"
    passes = job["passes"]
    assert passes["done"] and passes["outcome"] == "optimizers"
    assert passes["optimizers"] == [FUSED_MATMUL_FUSION] and passes["verified"]
    assert passes["first_failing_level"] == "extended"
    candidates = len(passes["candidates"])
    assert candidates == 3
    assert passes["checks"] <= math.ceil(math.log2(candidates)) + 2 == passes["check_bound"]  # no-optimizer included
    assert job["progress"]["checks_run"] == passes["checks"] == len(iterations)
    assert (iterations[0]["phase"], iterations[0]["verdict"]) == ("passes no-optimizer", "pass")
    assert "fail" in [i["verdict"] for i in iterations[1:]]  # with the fusion on, the failure is there
    # a spec that runs the model on no runtime: refused at the upload, saying what to use
    assert refused.status_code == 422 and "needs a check that runs the model" in refused.text
    # the CI client, on a failure that needs no optimizer: said in one check
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "succeeded" and summary["files"] == []
    assert summary["passes"]["outcome"] == "no-optimizer" and summary["passes"]["checks"] == 1

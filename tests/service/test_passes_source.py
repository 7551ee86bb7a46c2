"""A bisection job started from a finished reduce job (issue 28, ``source_job_id``) on the
embedded service: a ``bisect-passes`` job runs on that job's min-bad by default (``on:
original``: the uploaded model), and its answer goes into a copy of that job's bug-report bundle
(``passes.json``), downloadable at ``GET /v1/jobs/{id}/bundle`` and written by ``onnx-reducer
submit --wait``; another team's job is not
found, and malformed or misplaced fields are refused at the upload."""

from __future__ import annotations

import io
import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import httpx
import onnx
import pytest

from tests.pass_models import GELU_FUSION, fusion_model, optimized_op_spec
from tests.service.conftest import client_for
from tests.service.embedded import embedded_server
from tests.service.helpers import submit, wait_job

pytest.importorskip("onnxruntime")
MODEL = fusion_model().SerializeToString()
GELU = optimized_op_spec("Gelu")


@pytest.mark.slow
def test_a_bisect_passes_job_from_a_reduce_job_runs_its_min_bad_and_extends_its_bundle(tmp_path: Path) -> None:
    with embedded_server(tmp_path) as server:
        other = subprocess.run(
            ["onnx-reducer", "token", "create", "--team", "other"],
            cwd=tmp_path,
            env=server.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        with client_for(server.url, server.token) as client:
            reduce_id = str(_done(client, submit(client, MODEL, GELU, "fusions.onnx"))["id"])
            min_bad = onnx.load_from_string(client.get(f"/v1/jobs/{reduce_id}/artifacts/min-bad").content)
            source_bundle = client.get(f"/v1/jobs/{reduce_id}/bundle")
            assert source_bundle.status_code == 200
            on_min_bad = _done(client, submit(client, MODEL, GELU, task="bisect-passes", source_job_id=reduce_id))
            waited = _submit_and_wait(server.url, server.token, server.env, tmp_path, reduce_id)
            bundle = client.get(f"/v1/jobs/{on_min_bad['id']}/bundle")
            on_original = _done(
                client, submit(client, MODEL, GELU, task="bisect-passes", source_job_id=reduce_id, on="original")
            )
            no_source = client.get(f"/v1/jobs/{on_original['id']}/bundle")  # has one too: it has a source
            refusals = {
                "on without source": submit(client, MODEL, GELU, task="bisect-passes", on="min-bad"),
                "bad on": submit(client, MODEL, GELU, task="bisect-passes", source_job_id=reduce_id, on="both"),
                "reduce task": submit(client, MODEL, GELU, source_job_id=reduce_id),
                "not a reduce job": submit(
                    client, MODEL, GELU, task="bisect-passes", source_job_id=str(on_min_bad["id"])
                ),
            }
        with client_for(server.url, other) as stranger:
            foreign = submit(stranger, MODEL, GELU, task="bisect-passes", source_job_id=reduce_id)

    passes = on_min_bad["passes"]
    assert (passes["outcome"], passes["optimizers"], passes["verified"]) == ("optimizers", [GELU_FUSION], True)
    assert on_min_bad["nodes_before"] == len(min_bad.graph.node) < len(fusion_model().graph.node)
    assert len(passes["candidates"]) < len(on_original["passes"]["candidates"]) == 3  # the min-bad's few
    assert on_original["nodes_before"] == len(fusion_model().graph.node)
    assert on_original["passes"]["optimizers"] == [GELU_FUSION]

    assert bundle.status_code == 200, bundle.text
    with (
        zipfile.ZipFile(io.BytesIO(bundle.content)) as archive,
        zipfile.ZipFile(io.BytesIO(source_bundle.content)) as source,
    ):
        assert set(archive.namelist()) == {*source.namelist(), "passes.json"}  # the reduction's, and the answer
        assert json.loads(archive.read("passes.json"))["optimizers"] == [GELU_FUSION]
        assert archive.read("repro.py") == source.read("repro.py")
    assert no_source.status_code == 200
    assert waited.returncode == 0, waited.stderr
    with zipfile.ZipFile(tmp_path / "waited" / "bundle.zip") as written:  # submit --wait wrote its bundle
        assert json.loads(written.read("passes.json"))["optimizers"] == [GELU_FUSION]
        assert written.read("repro.py") == zipfile.ZipFile(io.BytesIO(source_bundle.content)).read("repro.py")
    assert sorted(p.name for p in (tmp_path / "waited").iterdir()) == ["bundle.zip"]

    assert foreign.status_code == 404, foreign.text  # another team's job is not found
    for why, refused in refusals.items():
        assert refused.status_code == 422, (why, refused.text)
    assert "on needs source_job_id" in refusals["on without source"].text
    assert "not a reduce job" in refusals["not a reduce job"].text


def _submit_and_wait(
    url: str, token: str, env: dict[str, str], folder: Path, reduce_id: str
) -> subprocess.CompletedProcess[str]:
    """``onnx-reducer submit --task bisect-passes --source-job REDUCE_ID --wait -o waited``."""
    (folder / "fusions.onnx").write_bytes(MODEL)
    (folder / "gelu.yaml").write_text(GELU)
    command = ["onnx-reducer", "submit", "fusions.onnx", "--check-spec", "gelu.yaml", "--task", "bisect-passes"]
    command += ["--source-job", reduce_id, "--wait", "-o", "waited", "--server", url, "--token", token]
    return subprocess.run(command, check=False, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def _done(client: httpx.Client, created: httpx.Response) -> dict[str, Any]:
    assert created.status_code == 202, created.text
    job = wait_job(client, str(created.json()["id"]), timeout=300)
    assert job["status"] == "succeeded", job
    return job

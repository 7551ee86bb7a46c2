"""The service's bug-report bundle: the worker that finishes a reduce job stores it;
``onnx-reducer download JOB --bundle`` (and ``GET /v1/jobs/{id}/bundle``) fetches it for the job's
team only; its repro.py reproduces the failure on min-bad and passes min-good, run by a plain
Python outside this repository. A bundle whose self-check does not reproduce is not kept, and the
job says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import onnx
import pytest

from tests.cli.helpers import save_branchy
from tests.precision_models import COMPARE_FP16, one_node_overflows
from tests.service.conftest import Processes, client_for
from tests.service.helpers import submit, wait_job
from tests.service.test_ci_client import Cli

pytestmark = pytest.mark.slow


@pytest.fixture
def cli(api_url: str, tokens: dict[str, str], tmp_path: Path) -> Cli:
    folder = tmp_path / "ci"
    folder.mkdir()
    return Cli(folder, api_url, tokens["team-a"])


def _repro(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"]}  # no PYTHONPATH: nothing of onnx-reducer on the path
    return subprocess.run(
        [sys.executable, "repro.py", *args], cwd=folder, env=env, capture_output=True, text=True, check=False
    )


def test_download_bundle_of_a_finished_job(cli: Cli, processes: Processes, tokens: dict[str, str]) -> None:
    processes.worker()
    cli.write("model.onnx", one_node_overflows().SerializeToString())
    cli.write("spec.yaml", COMPARE_FP16)
    submitted = cli.run("submit", "model.onnx", "--check-spec", "spec.yaml", "--wait", "-o", "out", "--json")
    assert submitted.code == 0, submitted.err
    job_id = submitted.json()["job_id"]

    result = cli.run("download", job_id, "--bundle", "-o", "report", "--json")
    assert result.code == 0, result.err
    assert result.json()["files"] == ["report/bundle.zip"]
    folder = cli.folder / "unpacked"
    with zipfile.ZipFile(cli.folder / "report" / "bundle.zip") as archive:
        archive.extractall(folder)
    assert [n.name for n in onnx.load(str(folder / "min_bad.onnx")).graph.node] == ["scale_up"]
    assert (folder / "min_bad.onnx").read_bytes() == (cli.folder / "out" / "min-bad.onnx").read_bytes()
    readme = (folder / "README.md").read_text()
    assert "`model.onnx`" in readme and "the failure reproduces (exit 1)" in readme
    assert "Checks the bundle ran itself (repro.py, beyond the reduction's): 2" in readme
    assert "This bundle is verified." in readme
    assert json.loads((folder / "environment.json").read_text())["host"]
    bad, good = _repro(folder), _repro(folder, "min_good.onnx")
    assert (bad.returncode, good.returncode) == (1, 0), bad.stdout + good.stdout

    with client_for(cli.server, tokens["team-a"]) as client:
        job = client.get(f"/v1/jobs/{job_id}").json()
        assert job["links"]["bundle"] == f"/v1/jobs/{job_id}/bundle"
        # the final verification judged the models in the worker's environment; the bundle's
        # self-check runs repro.py on both once more, in its clean one, and counts those runs
        assert job["verified"]["bundle"] == {"checks": 2, "reused": []}
        own = client.get(job["links"]["bundle"])
        assert own.status_code == 200 and own.headers["content-type"] == "application/zip"
    with client_for(cli.server, tokens["team-b"]) as other:
        refused = other.get(f"/v1/jobs/{job_id}/bundle")
    assert refused.status_code == 404
    assert refused.headers["content-type"] == "application/problem+json"


def test_a_bundle_whose_self_check_cannot_reproduce_is_not_kept(
    command_api_url: str, processes: Processes, tokens: dict[str, str], tmp_path: Path
) -> None:
    """A command check that runs ``onnx-reducer inspect``: the worker has onnx-reducer, a clean
    environment (onnx, onnxruntime, numpy) does not, so the bundle's repro.py cannot run its check
    there (exit 2). The job succeeds with its models but keeps no bundle, and says why: in its end
    event and in the download's 404."""
    processes.worker()
    spec = 'kind: command\ncommand: [onnx-reducer, inspect, "{model}"]\nfail_regex: ["Op: Mul"]\n'
    model = tmp_path / "model.onnx"
    save_branchy(str(model))
    with client_for(command_api_url, tokens["team-a"]) as client:
        response = submit(client, model.read_bytes(), spec)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        job = wait_job(client, job_id)
        assert job["status"] == "succeeded", job
        assert client.get(f"/v1/jobs/{job_id}/artifacts/min-bad").status_code == 200
        refused = client.get(f"/v1/jobs/{job_id}/bundle")
        events = client.get(f"/v1/jobs/{job_id}/events", headers={"Accept": "text/event-stream"}).text
    assert refused.status_code == 404 and refused.headers["content-type"] == "application/problem+json"
    detail = refused.json()["detail"]
    assert "repro.py on min_bad.onnx, run in a clean environment" in detail, detail
    assert "cannot run the check there (exit 2)" in detail
    assert "bundle_refused" in events and "cannot run the check there (exit 2)" in events

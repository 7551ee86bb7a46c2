"""One session, shared: the same model, compare spec and golden values give the same checks (the
same phases and candidate fingerprints, in order), the same count and the same min-bad and
min-good models through ``onnx-reducer reduce`` and through a service job (PostgreSQL, Redis, a
Celery worker). With golden values the overflow is localised (original, layerwise run, the node
alone, its producer for min-good); without them localisation falls back to reduction."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import onnx
import pytest

from tests.checks.conftest import COMPARE_FP16
from tests.checks.models import overflow_model
from tests.service.conftest import Processes, client_for
from tests.service.helpers import read_sse, wait_job

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "reducer_cli.main"]
MODEL = overflow_model().SerializeToString()


def _cli(folder: Path, golden: bool) -> dict[str, Any]:
    """The command line's run: every verdict in order (checked, or answered by the verdict cache),
    the checks it ran, min-bad and min-good bytes."""
    command = [*CLI, "reduce", "model.onnx", "-o", "min_bad.onnx", "--min-good", "min_good.onnx"]
    command += ["--check-spec", "spec.yaml", "--summary-json", "summary.json", "-q"]
    command += ["--golden", "model.golden"] if golden else []
    subprocess.run(command, cwd=folder, check=True, capture_output=True, timeout=300)
    summary = json.loads((folder / "summary.json").read_text())
    return {
        "verdicts": [(it["phase"], it["fingerprint"], bool(it["cached"])) for it in summary["iterations"]],
        "checks": [(it["phase"], it["fingerprint"]) for it in summary["iterations"] if not it["cached"]],
        "checks_run": summary["checks_run"],
        "cache_hits": summary["cache_hits"],
        "localization": summary["localization"]["path"],
        "min_bad": (folder / "min_bad.onnx").read_bytes(),
        "min_good": (folder / "min_good.onnx").read_bytes(),
    }


def _service(client: Any, job_id: str) -> dict[str, Any]:
    job = wait_job(client, job_id, timeout=300)
    assert job["status"] == "succeeded", job
    iterations = client.get(f"/v1/jobs/{job_id}/iterations", params={"limit": 1000}).json()["items"]
    end = [e for e in read_sse(client, f"/v1/jobs/{job_id}/events") if e.kind == "job.succeeded"]
    return {
        "verdicts": [(it["phase"], it["fingerprint"], it["cached"] is not None) for it in iterations],
        "checks": [(it["phase"], it["fingerprint"]) for it in iterations if it["cached"] is None],
        "checks_run": job["progress"]["checks_run"],
        "cache_hits": job["progress"]["cache_hits"],
        "localization": end[0].data["localization"]["path"],
        "min_bad": client.get(f"/v1/jobs/{job_id}/artifacts/min-bad").content,
        "min_good": client.get(f"/v1/jobs/{job_id}/artifacts/min-good").content,
    }


def test_a_service_job_runs_the_same_checks_as_the_command_line(
    api_url: str, processes: Processes, tokens: dict[str, str], tmp_path: Path
) -> None:
    folder = tmp_path / "cli"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(MODEL)
    (folder / "spec.yaml").write_text(COMPARE_FP16)
    subprocess.run([*CLI, "golden", "model.onnx", "-o", "model.golden"], cwd=folder, check=True, timeout=120)
    golden = (folder / "model.golden").read_bytes()
    processes.worker()
    with client_for(api_url, tokens["team-a"]) as client:
        ids = {}
        for case, extra in {"golden": {"golden": ("model.golden", golden)}, "no golden": {}}.items():
            files = {"model": ("model.onnx", MODEL), **extra}
            response = client.post("/v1/jobs", files=files, data={"check_spec": COMPARE_FP16})
            assert response.status_code == 202, response.text
            ids[case] = response.json()["id"]
        service = {case: _service(client, job_id) for case, job_id in ids.items()}
    command_line = {"golden": _cli(folder, golden=True), "no golden": _cli(folder, golden=False)}

    for case, expected in command_line.items():
        for key, value in expected.items():
            assert service[case][key] == value, (case, key)
    localized = service["golden"]
    phases = [phase for phase, _ in localized["checks"]]
    data = phases.count("data")  # smaller inputs, at the end (reducer_core.data_reduction)
    assert phases == ["original", "localize", "min-good"] + ["data"] * data
    assert localized["checks_run"] == 4 + data  # the layerwise run is the fourth
    assert localized["localization"] == "layerwise"
    assert [n.name for n in onnx.load_from_string(localized["min_good"]).graph.node] == ["scale_up"]
    assert [n.name for n in onnx.load_from_string(localized["min_bad"]).graph.node] == ["overflow"]
    fallback = service["no golden"]
    assert [phase for phase, _ in fallback["checks"]][:2] == ["original", "localize"]
    assert fallback["localization"] == "reduction"

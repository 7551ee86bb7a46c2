"""A service job's answer is verified before it succeeds (``worker.final_checks``), with
``run_job`` (the worker's own code) against PostgreSQL: min-bad and min-good are the very models a
check judged, or are checked once more as stored; a final check that disagrees fails the job
(``unverified-result``, client exit 11); a check that fails whatever the model is called out on
the job (``suspect``) and by ``onnx-reducer status`` (exit 10); a model-dependent check is not."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import onnx
import pytest

from persistence.db import Database
from persistence.enums import ArtifactKind
from persistence.repositories import ArtifactRepository
from reducer_cli.client_exit import EXIT_OK, EXIT_SUSPECT, EXIT_UNVERIFIED, exit_for_job
from reducer_cli.client_output import job_lines
from reducer_client import Job
from tests.models import weighted_model
from tests.service.conftest import client_for
from tests.service.helpers import OP_PRESENT_MUL, chain_model, submit
from tests.service.web_harness import catalogue, chromium, embedded_service
from worker.context import RunnerContext, context_from_settings
from worker.run_job import run_job
from worker.settings import WorkerSettings


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    settings = WorkerSettings(database_url=db_url, data_dir=data_dir, allow_command_checks=True, job_lease_s=60.0)
    ctx = context_from_settings(settings)
    yield ctx
    ctx.db.dispose()


def _run(client: httpx.Client, ctx: RunnerContext, model: bytes, spec: str) -> dict[str, Any]:
    response = submit(client, model, spec)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    run_job(job_id, ctx)
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
    return job


def _command(script: str) -> str:
    return f'kind: command\ncommand: [sh, -c, "{script}", check, "{{model}}"]\n'


def test_a_job_hands_over_the_models_a_check_judged(
    client: httpx.Client, ctx: RunnerContext, database: Database
) -> None:
    job = _run(client, ctx, chain_model().SerializeToString(), OP_PRESENT_MUL)
    assert job["status"] == "succeeded", job
    min_bad = client.get(f"/v1/jobs/{job['id']}/artifacts/min-bad").content
    min_good = client.get(f"/v1/jobs/{job['id']}/artifacts/min-good").content
    with database.session() as session:
        judged = {a.sha256 for a in ArtifactRepository(session).of_kind(job["id"], ArtifactKind.ITERATION)}
    for name, data in (("min_bad", min_bad), ("min_good", min_good)):
        digest = hashlib.sha256(data).hexdigest()
        assert job["verified"][name] == {"status": "judged", "sha256": digest, "checks": 0}
        assert digest in judged, "the very model a check judged"
    assert job["suspect"] is None
    assert exit_for_job(Job.from_json(job)) == EXIT_OK
    assert "verified: min-bad judged, min-good judged" in job_lines(Job.from_json(job))


def test_a_model_with_weights_is_checked_once_more_as_stored(client: httpx.Client, ctx: RunnerContext) -> None:
    job = _run(client, ctx, weighted_model().SerializeToString(), OP_PRESENT_MUL)
    assert job["status"] == "succeeded", job
    bad, good = job["verified"]["min_bad"], job["verified"]["min_good"]
    assert (bad["status"], bad["checks"], bad["verdict"]) == ("rechecked", 1, "fail")
    assert (good["status"], good["checks"], good["verdict"]) == ("rechecked", 1, "pass")
    min_bad = client.get(f"/v1/jobs/{job['id']}/artifacts/min-bad").content
    assert hashlib.sha256(min_bad).hexdigest() == bad["sha256"]
    assert [n.name for n in onnx.load_from_string(min_bad).graph.node] == ["NodeQ_"]


def test_a_final_check_that_disagrees_fails_the_job(client: httpx.Client, ctx: RunnerContext) -> None:
    """The check fails only while the weights are referenced from a weight file: the stored
    self-contained min-bad passes when checked once more, so the job does not succeed."""
    check = _command("grep -q NodeQ_ $1 && grep -q iter $1 && exit 1; exit 0")
    job = _run(client, ctx, weighted_model().SerializeToString(), check)
    assert job["status"] == "failed", job
    assert job["error"]["code"] == "unverified-result"
    assert "did not fail like the original" in job["error"]["message"]
    assert job["verified"]["min_bad"]["status"] == "disagrees"
    assert exit_for_job(Job.from_json(job)) == EXIT_UNVERIFIED


def test_a_check_with_a_typo_in_its_script_path_is_called_out(client: httpx.Client, ctx: RunnerContext) -> None:
    spec = f'kind: command\ncommand: ["{sys.executable}", /nonexistent/chek.py, "{{model}}"]\n'
    job = _run(client, ctx, chain_model(length=6, mul_at=3).SerializeToString(), spec)
    assert job["status"] == "succeeded", job  # Polygraphy's semantics: the reduction completes...
    suspect = job["suspect"]
    assert suspect is not None  # ...and is flagged
    assert "fails regardless of the model" in suspect["message"]
    assert "can't open file" in suspect["output"] and "cannot open the check script" in suspect["crash"]
    parsed = Job.from_json(job)
    assert exit_for_job(parsed) == EXIT_SUSPECT
    assert any(line.startswith("SUSPECT: The check fails regardless of the model") for line in job_lines(parsed))


def test_a_model_dependent_check_that_fails_every_candidate_is_not_flagged(
    client: httpx.Client, ctx: RunnerContext
) -> None:
    """Every candidate of this chain has a node named n<i>_..., so each fails; the trivial model has
    none and passes: the check depends on the model, nothing is flagged."""
    model = chain_model(length=6, mul_at=3).SerializeToString()
    job = _run(client, ctx, model, _command("grep -q 'n[0-9][0-9]*_' $1 && exit 1; exit 0"))
    assert job["status"] == "succeeded", job
    assert job["suspect"] is None
    assert exit_for_job(Job.from_json(job)) == EXIT_OK


@pytest.mark.slow
def test_the_job_page_says_what_was_verified_and_that_the_check_is_suspect(tmp_path: Path) -> None:
    en = catalogue("en")
    spec = f'kind: command\ncommand: ["{sys.executable}", /nonexistent/chek.py, "{{model}}"]\n'
    with embedded_service(tmp_path, run_jobs=False) as service, client_for(service.url, service.token) as client:
        settings = WorkerSettings(
            database_url=f"sqlite:///{tmp_path / 'onnx-reducer.db'}",
            data_dir=service.data_dir,
            allow_command_checks=True,
        )
        ctx = context_from_settings(settings)
        job_id = submit(client, chain_model(length=6, mul_at=3).SerializeToString(), spec).json()["id"]
        run_job(job_id, ctx)
        ctx.db.dispose()
        with chromium() as browser:
            browser.open(f"{service.url}/#/jobs/{job_id}")
            browser.sign_in(service.token)
            browser.wait(lambda d: browser.text("job-verified") != "", "the verified fact")
            assert browser.text("job-verified") == f"{en['job.verified.min_bad']}: {en['job.verified.judged']}"
            browser.wait(lambda d: browser.text("job-suspect-text").startswith(en["job.suspect"]), "the suspect check")
            assert "cannot open the check script" in browser.text("job-suspect-text")
            assert "can't open file" in browser.text("job-suspect-output")

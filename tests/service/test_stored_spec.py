"""Issue 27: the check spec is parsed once, at intake, and stored parsed (``jobs.spec``,
``persistence.stored_spec``); the text stays as the user sent it.

- the intake reads the text once (it read it twice: ``is_interactive_spec`` then ``parse_check_spec``);
- a compare job run end to end by a worker (start, every check, localisation, finish) and its
  graph view's node errors parse no spec text: the parses are counted (``checks.spec._load_document``);
- a row whose stored spec this version no longer reads crashes no reader: a worker fails the job
  as an invalid check saying to submit it again, the node errors come without a tolerance."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.inspection import Inspection, InspectRequest, inspect_upload
from api.intake import upload_limits
from api.settings import ApiSettings
from persistence.db import Database
from persistence.models import Job
from tests.checks.conftest import COMPARE_FP16
from tests.checks.models import chain_model
from tests.service.helpers import count_spec_parses, submit
from tests.service.in_process import one_check_context
from worker.context import RunnerContext
from worker.run_job import take

MODEL = chain_model(12, fault_at=5).SerializeToString()
NO_LONGER_READ = {"kind": "compare", "retired_field": 1}  # as an older version might have stored it


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The spec texts parsed in this process from now on."""
    return count_spec_parses(monkeypatch)


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    yield from one_check_context(db_url, data_dir)


def _run_to_end(ctx: RunnerContext) -> None:
    """This process takes and runs every piece of work there is (a start, checks, the finish)."""
    while (claim := take(ctx)) is not None:
        follow = claim.run(ctx)
        while follow is not None:
            follow = follow.run(ctx)


def _row(database: Database, job_id: str) -> Job:
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.expunge(job)
        return job


def test_the_intake_reads_the_spec_text_once(tmp_path: Path, parsed: list[str]) -> None:
    upload = tmp_path / "upload.bin"
    upload.write_bytes(MODEL)
    limits = upload_limits(ApiSettings(allow_command_checks=False))
    fields = {"check_spec": COMPARE_FP16}
    request = InspectRequest(tmp_path, upload, "chain.onnx", len(MODEL), fields, None, 0, limits)
    inspection = inspect_upload(request)
    assert isinstance(inspection, Inspection), inspection
    assert len(parsed) == 1, f"the intake parsed the spec text {len(parsed)} times"


def test_a_job_run_end_to_end_and_its_graph_view_parse_no_spec_text(
    quiet_client: httpx.Client, ctx: RunnerContext, parsed: list[str]
) -> None:
    job_id = submit(quiet_client, MODEL, COMPARE_FP16).json()["id"]  # parsed by the intake's own process
    _run_to_end(ctx)
    job = quiet_client.get(f"/v1/jobs/{job_id}").json()
    errors = quiet_client.get(f"/v1/jobs/{job_id}/node-errors")
    assert job["status"] == "succeeded", job
    assert job["check_spec"] == COMPARE_FP16  # the text as sent
    assert errors.status_code == 200, errors.text
    assert errors.json()["tolerance"] == {"atol": 0.001, "rtol": 0.001, "per_output": {}}
    assert parsed == [], f"the spec text was parsed {len(parsed)} times after the intake"


def test_a_stored_spec_this_version_no_longer_reads_fails_the_job_and_leaves_the_view_without_tolerance(
    quiet_client: httpx.Client, ctx: RunnerContext
) -> None:
    done = submit(quiet_client, MODEL, COMPARE_FP16).json()["id"]
    _run_to_end(ctx)
    waiting = submit(quiet_client, MODEL, COMPARE_FP16).json()["id"]
    with ctx.db.session() as session:
        for job_id, stored in ((done, NO_LONGER_READ), (waiting, None)):  # None: the back-fill could not parse it
            row = session.get(Job, job_id)
            assert row is not None
            row.spec = stored
    _run_to_end(ctx)
    failed = quiet_client.get(f"/v1/jobs/{waiting}").json()
    errors = quiet_client.get(f"/v1/jobs/{done}/node-errors")
    assert failed["status"] == "failed", failed
    assert failed["error"]["code"] == "invalid-check", failed
    assert "submit the job again" in failed["error"]["message"]
    assert errors.status_code == 200, errors.text
    assert errors.json()["tolerance"] is None
    assert _row(ctx.db, done).check_spec == COMPARE_FP16

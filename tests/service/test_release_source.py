"""A bisect-releases job started from a reduce job of its team (issue 28, ``source_job_id``): its
answer goes into a copy of that job's bug-report bundle as ``releases.json``, downloadable at
``GET /v1/jobs/{id}/bundle`` as the command line's ``bisect-releases --bundle`` writes it; a job
without a source has none (the 404 says how to get one). ``run_job``'s own steps run in this
process against PostgreSQL, offering its own onnxruntime and one older release
(``RUNTIME_ENVS``: tests/ort_envs.py); the api is a real process."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import onnxruntime
import pytest
from sqlalchemy import select

from examples.build_example_model import build_example_model
from persistence.db import Database
from persistence.enums import ArtifactKind, JobStatus
from persistence.models import Team
from persistence.repositories import ArtifactRepository
from tests.ort_envs import RELEASES, env_pythons_or_skip
from tests.service.conftest import client_for
from tests.service.helpers import stored_job, submit
from tests.service.in_process import in_process_context
from worker.context import RunnerContext
from worker.job_start import start_job
from worker.release_envs import load_runtime_envs
from worker.run_job import take

pytestmark = pytest.mark.slow
OWN = onnxruntime.__version__
OLD = RELEASES[0]
_OWN_MINOR = tuple(int(p) for p in OWN.split(".")[:2])
PROGRAM = (
    "import sys, onnxruntime as o; "
    f"sys.exit(1 if tuple(int(p) for p in o.__version__.split('.')[:2]) >= {_OWN_MINOR} else 0)"
)
SPEC = json.dumps({"kind": "command", "command": ["python", "-c", PROGRAM]})


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    python = env_pythons_or_skip()[OLD]
    for context in in_process_context(db_url, data_dir, allow_command_checks=True, farm_verdict_cache=False):
        context.runtime_envs = load_runtime_envs(f"{OLD}={python}")  # as worker.process loads them
        yield context


def _reduce_job_with_a_bundle(db_url: str, ctx: RunnerContext, tmp_path: Path) -> str:
    """A succeeded reduce job of team-a with a min-bad and a bug-report bundle in the store."""
    model = tmp_path / "min_bad.onnx"
    model.write_bytes(build_example_model().SerializeToString())
    bundle = tmp_path / "bug.zip"
    with zipfile.ZipFile(bundle, "w") as archive:
        archive.writestr("repro.py", "print('the reduction')\n")
        archive.writestr("README.md", "min-bad\n")
    database = Database(db_url)
    try:
        with database.session() as session:
            team = session.scalars(select(Team).where(Team.name == "team-a")).one()
            job = stored_job(session, team.id, JobStatus.SUCCEEDED)
            artifacts = ArtifactRepository(session)
            artifacts.put(job.id, ArtifactKind.MIN_BAD, "min-bad", ctx.layout.store.put_file(model))
            artifacts.put(job.id, ArtifactKind.BUNDLE, "bundle", ctx.layout.store.put_file(bundle))
            session.commit()
            return job.id
    finally:
        database.dispose()


def test_a_release_job_from_a_reduce_job_puts_its_answer_into_that_jobs_bundle(
    command_api_url: str, tokens: dict[str, str], ctx: RunnerContext, db_url: str, tmp_path: Path
) -> None:
    source_id = _reduce_job_with_a_bundle(db_url, ctx, tmp_path)
    model = build_example_model().SerializeToString()
    releases = f"{OLD},{OWN}"
    with client_for(command_api_url, tokens["team-a"]) as client:
        ids = []
        for fields in ({"source_job_id": source_id}, {}):
            created = submit(client, model, SPEC, task="bisect-releases", releases=releases, **fields)
            assert created.status_code == 202, created.text
            ids.append(created.json()["id"])
            taken = take(ctx)
            assert taken is not None and taken.job_id == ids[-1]
            start_job(ctx, ids[-1])
        with_source, without = (client.get(f"/v1/jobs/{job_id}").json() for job_id in ids)
        bundle = client.get(f"/v1/jobs/{ids[0]}/bundle")
        none = client.get(f"/v1/jobs/{ids[1]}/bundle")
        refused = submit(client, model, SPEC, task="bisect-releases", source_job_id=source_id, on="min-bad")

    assert with_source["status"] == without["status"] == "succeeded", with_source
    answer = with_source["releases"]
    assert (answer["first_failing"], answer["last_passing"]) == (OWN, OLD), answer
    assert bundle.status_code == 200, bundle.text
    with zipfile.ZipFile(io.BytesIO(bundle.content)) as archive:
        assert sorted(archive.namelist()) == ["README.md", "releases.json", "repro.py"]
        written = json.loads(archive.read("releases.json"))
        assert (written["first_failing"], written["last_passing"]) == (OWN, OLD)
    assert none.status_code == 404 and "source_job_id" in none.text
    assert refused.status_code == 422 and "on applies to task bisect-passes only" in refused.text

"""A bisect-releases job started from a reduce job of its team (issue 28, ``source_job_id``) runs
each release's check on that job's min-bad (``on: original``: on the uploaded model), and its
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

import httpx
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper
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
PROGRAM = (  # says the size of the model it was given, and fails on this process's release and newer
    "import os, sys, onnxruntime as o; print('model bytes', os.path.getsize(sys.argv[1])); "
    f"sys.exit(1 if tuple(int(p) for p in o.__version__.split('.')[:2]) >= {_OWN_MINOR} else 0)"
)
SPEC = json.dumps({"kind": "command", "command": ["python", "-c", PROGRAM, "{model}"]})


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    python = env_pythons_or_skip()[OLD]
    for context in in_process_context(db_url, data_dir, allow_command_checks=True, farm_verdict_cache=False):
        context.runtime_envs = load_runtime_envs(f"{OLD}={python}")  # as worker.process loads them
        yield context


def _reduce_job_with_a_bundle(db_url: str, ctx: RunnerContext, tmp_path: Path) -> str:
    """A succeeded reduce job of team-a with a min-bad (``_min_bad``) and a bug-report bundle in the store."""
    model = tmp_path / "min_bad.onnx"
    model.write_bytes(_min_bad().SerializeToString())
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


def _min_bad() -> onnx.ModelProto:
    """One node: fewer than the uploaded model's (``build_example_model``)."""
    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "min_bad", [value], [])
    graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]))
    return helper.make_model(graph)


def _checked_sizes(client: httpx.Client, job_id: str) -> set[str]:
    """The model sizes the job's checks printed (one per model they were given)."""
    rows = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
    assert rows, job_id
    return {line for row in rows for line in (row["output_tail"] or "").splitlines() if "model bytes" in line}


def test_a_release_job_from_a_reduce_job_runs_its_min_bad_and_puts_its_answer_into_that_jobs_bundle(
    command_api_url: str, tokens: dict[str, str], ctx: RunnerContext, db_url: str, tmp_path: Path
) -> None:
    source_id = _reduce_job_with_a_bundle(db_url, ctx, tmp_path)
    model = build_example_model().SerializeToString()
    releases = f"{OLD},{OWN}"
    with client_for(command_api_url, tokens["team-a"]) as client:
        ids = []
        for fields in ({"source_job_id": source_id}, {}, {"source_job_id": source_id, "on": "original"}):
            created = submit(client, model, SPEC, task="bisect-releases", releases=releases, **fields)
            assert created.status_code == 202, created.text
            ids.append(created.json()["id"])
            taken = take(ctx)
            assert taken is not None and taken.job_id == ids[-1]
            start_job(ctx, ids[-1])
        with_source, without, on_original = (client.get(f"/v1/jobs/{job_id}").json() for job_id in ids)
        sizes = [_checked_sizes(client, job_id) for job_id in ids]
        bundle = client.get(f"/v1/jobs/{ids[0]}/bundle")
        none = client.get(f"/v1/jobs/{ids[1]}/bundle")
        refused = submit(client, model, SPEC, task="bisect-releases", source_job_id=source_id, on="both")

    assert with_source["status"] == without["status"] == on_original["status"] == "succeeded", with_source
    min_bad_nodes, model_nodes = len(_min_bad().graph.node), len(build_example_model().graph.node)
    assert min_bad_nodes < model_nodes
    assert (with_source["nodes_before"], on_original["nodes_before"]) == (min_bad_nodes, model_nodes)
    assert sizes[0] == {f"model bytes {len(_min_bad().SerializeToString())}"}, sizes  # every release: the min-bad
    assert sizes[1] == sizes[2] == {f"model bytes {len(model)}"}, sizes  # the uploaded model
    assert on_original["releases"]["first_failing"] == OWN
    answer = with_source["releases"]
    assert (answer["first_failing"], answer["last_passing"]) == (OWN, OLD), answer
    assert bundle.status_code == 200, bundle.text
    with zipfile.ZipFile(io.BytesIO(bundle.content)) as archive:
        assert sorted(archive.namelist()) == ["README.md", "releases.json", "repro.py"]
        written = json.loads(archive.read("releases.json"))
        assert (written["first_failing"], written["last_passing"]) == (OWN, OLD)
    assert none.status_code == 404 and "source_job_id" in none.text
    assert refused.status_code == 422 and "on must be one of min-bad, original" in refused.text

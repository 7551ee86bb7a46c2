"""A bisect-passes job taken again after its worker died mid-search (issue 28): the search is
rebuilt from the probes the job stored (``session_state``, as ``worker.passes_job`` writes them
after every probe) and runs only the probes that had not ended, with the same answer as an
uninterrupted search. ``run_job``'s own steps run in this process against PostgreSQL; the api
is a real process; the stored probes are those of a real search of the same model and spec."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

from checks.spec import parse_check_spec
from engine.pass_bisect import bisect_passes
from persistence.db import Database
from persistence.models import Job
from tests.pass_models import FUSED_MATMUL_FUSION, fusion_model, optimized_op_spec
from tests.service.conftest import client_for
from tests.service.helpers import submit
from tests.service.in_process import in_process_context
from worker.context import RunnerContext
from worker.job_start import start_job
from worker.run_job import take

pytest.importorskip("onnxruntime")
DIED_AFTER = 2  # probes the dead worker had stored


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    yield from in_process_context(db_url, data_dir, farm_verdict_cache=False)


def test_a_job_taken_again_runs_only_the_probes_its_dead_worker_had_not_stored(
    api_url: str, tokens: dict[str, str], ctx: RunnerContext, db_url: str, tmp_path: Path
) -> None:
    spec = optimized_op_spec("FusedMatMul")
    onnx.save(fusion_model(), str(tmp_path / "fusions.onnx"))
    whole = bisect_passes(parse_check_spec(spec), tmp_path / "fusions.onnx")
    assert whole.checks > DIED_AFTER + 1
    stored = [p.to_json() for p in whole.probes[:DIED_AFTER]]
    with client_for(api_url, tokens["team-a"]) as client:
        created = submit(client, fusion_model().SerializeToString(), spec, task="bisect-passes")
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]
        taken = take(ctx)
        assert taken is not None and taken.job_id == job_id
        database = Database(db_url)
        with database.session() as session:
            row = session.get(Job, job_id)
            assert row is not None
            row.session_state = {"task": "bisect-passes", "probes": stored}  # what the dead worker wrote
        database.dispose()
        start_job(ctx, job_id)
        job = client.get(f"/v1/jobs/{job_id}").json()
        iterations = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]

    assert job["status"] == "succeeded", job
    passes = job["passes"]
    assert (passes["outcome"], passes["optimizers"], passes["verified"]) == ("optimizers", [FUSED_MATMUL_FUSION], True)
    assert passes["checks"] == whole.checks
    ran_now = [p.role for p in whole.probes[DIED_AFTER:]]
    assert [i["phase"] for i in iterations] == [f"passes {role}" for role in ran_now]  # no stored probe again
    assert job["progress"]["checks_run"] == len(ran_now)
    assert [p["verdict"] for p in passes["probes"]] == [p.verdict for p in whole.probes]

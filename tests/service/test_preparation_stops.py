"""A cancel or a delete reaches a Celery worker's preparation (issue 30, R8): loading a big model
takes many seconds in code that looks at no flag, and the worker used to go on preparing the ended
job (unavailable meanwhile) and to make the deleted job's folder again. Now the preparation is
stopped (``worker.preparing``): its log says so, the worker takes the next job, and no folder is
left. How long the worker took to take the next job is recorded (the ``freed_s`` property), not
asserted: a timing on a loaded machine is no test (the preparation's own stop is)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from examples.build_example_model import build_example_model
from tests.service.conftest import Processes, client_for, start_api
from tests.service.helpers import chain_model, submit, wait_job
from tests.service.stopping import stop_then_take_next, wait_status

NODES = 120_000  # about 15 s of preparation on a 2-core machine


@pytest.mark.parametrize("how", ["cancel", "delete"])
def test_a_stopped_preparation_frees_the_worker_and_leaves_no_folder(
    processes: Processes,
    tokens: dict[str, str],
    data_dir: Path,
    how: str,
    record_property: Callable[[str, object], None],
) -> None:
    worker = processes.worker()
    url = start_api(processes)
    big = chain_model(NODES, NODES // 2).SerializeToString()
    small = build_example_model().SerializeToString()
    with client_for(url, tokens["team-a"]) as client:
        response = submit(client, big)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        wait_status(client, job_id, {"running"}, timeout=120)  # claimed: its preparation has begun
        assert not client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]  # still preparing

        next_id, freed = stop_then_take_next(client, job_id, how, small, cancel_timeout=30, take_timeout=120)
        record_property("freed_s", f"{freed:.2f}")
        # stopped in the middle, not prepared to its end and then dropped (the log line of ``prepared_job``)
        worker.wait_for(f"job {job_id}: preparation stopped after", timeout=30)
        # the only worker took the next job: it has finished with the stopped one
        work = data_dir / "jobs" / job_id / "work"
        left = sorted(p.name for p in work.iterdir()) if work.is_dir() else []
        job_folder_exists = (data_dir / "jobs" / job_id).exists()
        assert wait_job(client, next_id)["status"] == "succeeded"
    assert left == [], f"left in the stopped job's work folder: {left}"
    if how == "delete":
        assert not job_folder_exists, "the deleted job's folder was made again"

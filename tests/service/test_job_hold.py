"""``worker.job_hold``: what the probe-by-probe jobs (bisect-passes, bisect-releases) ask their
job's row between probes, shared by both (was a copy in each). Against PostgreSQL and a real api
process; the job is claimed by ``run_job``'s own step in this process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.build_example_model import build_example_model
from jobflow.ending import JobCancelledError
from tests.service.conftest import client_for
from tests.service.helpers import submit
from tests.service.in_process import in_process_context
from worker.context import RunnerContext
from worker.job_hold import JobGoneError, held, stop_if_asked
from worker.run_job import take


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    yield from in_process_context(db_url, data_dir, farm_verdict_cache=False)


def test_a_running_job_goes_on_until_cancelled_and_only_its_attempt_holds_it(
    api_url: str, tokens: dict[str, str], ctx: RunnerContext
) -> None:
    with client_for(api_url, tokens["team-a"]) as client:
        created = submit(client, build_example_model().SerializeToString(), task="bisect-releases")
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]
        taken = take(ctx)
        assert taken is not None and taken.job_id == job_id
        stop_if_asked(ctx, job_id)  # running, nothing asked: goes on
        with ctx.db.session() as session:
            attempt = held(session, job_id, 1).attempts
            assert attempt == 1
            with pytest.raises(JobGoneError):
                held(session, job_id, 2)  # another worker's attempt
        with pytest.raises(JobGoneError):
            stop_if_asked(ctx, "no-such-job")
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        with pytest.raises(JobCancelledError):
            stop_if_asked(ctx, job_id)

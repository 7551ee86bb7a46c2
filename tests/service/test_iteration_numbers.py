"""Iteration numbers have no gap, whatever happens to the checks in flight: a job's checks spread
over three (simulated) workers, the check queued last answers first, then the job is cancelled
with the others still in flight. The one recorded verdict is iteration 1 (its event says it ran
as the later number), and the cancelled checks take no number. ``run_job``'s own steps
(``take``, ``start_job``, ``RunCheck``) run in this process against PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from persistence.db import Database
from persistence.enums import JobStatus
from persistence.models import utcnow
from persistence.repositories import WorkerRepository, WorkerStatus
from tests.service.helpers import chain_model, read_sse, submit
from tests.service.in_process import in_process_context
from worker.context import RunnerContext
from worker.job_start import start_job
from worker.run_job import RunCheck, StartJob, take
from worker.stops import end_job
from worker.unit_run import UnitTicket

MODEL = chain_model(12, 7).SerializeToString()


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    yield from in_process_context(db_url, data_dir, max_workers_per_job=3)


def _three_live_workers(db_url: str, queue: str) -> None:
    """Heartbeats of three workers, so the job gets three slots (checks in flight at once)."""
    database = Database(db_url)
    with database.session() as session:
        for n in range(3):
            status = WorkerStatus(f"w{n}", "host", [queue], {}, None, None, 0.0, 0, utcnow())
            WorkerRepository(session).report(status)
    database.dispose()


def _claim_all(ctx: RunnerContext) -> list[UnitTicket]:
    tickets = []
    while (taken := take(ctx)) is not None:
        assert isinstance(taken, RunCheck)
        tickets.append(taken.unit)
    return tickets


def test_checks_cancelled_in_flight_leave_no_gap_in_iteration_numbers(
    client: httpx.Client, db_url: str, ctx: RunnerContext
) -> None:
    job_id = submit(client, MODEL).json()["id"]
    queue = client.get(f"/v1/jobs/{job_id}").json()["queue"]
    _three_live_workers(db_url, queue)
    started = take(ctx)
    assert isinstance(started, StartJob)
    start_job(ctx, job_id)
    in_flight = _claim_all(ctx)
    while len(in_flight) < 2:  # one check at a time until the session looks ahead
        assert len(in_flight) == 1, "the job ended before it ran two checks at once"
        RunCheck(in_flight[0]).run(ctx, follow=False)
        in_flight = _claim_all(ctx)
    recorded_before = len(client.get(f"/v1/jobs/{job_id}/iterations").json()["items"])
    last = max(in_flight, key=lambda t: t.request.number)  # type: ignore[union-attr]
    RunCheck(last).run(ctx, follow=False)  # the check queued last answers first
    assert end_job(ctx, job_id, JobStatus.CANCELLED, None, None)  # the others are cancelled in flight

    items = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
    numbers = sorted(int(item["number"]) for item in items)
    assert numbers == list(range(1, recorded_before + 2)), numbers
    events = [e for e in read_sse(client, f"/v1/jobs/{job_id}/events") if e.kind == "iteration"]
    assert events[-1].data["number"] == recorded_before + 1
    assert events[-1].data["started_as"] == last.request.number > recorded_before + 1  # type: ignore[union-attr]
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"

"""The worker that records one of a job's verdicts claims the job's next check in the same
transaction while nothing else waits for it (``worker.claims.claim_follow_up``), and leaves the
choice to fair share as soon as another job has work; a verdict's database round trips are
counted (statements, not time: ``bench/service_overhead_bench.py`` times them). ``run_job``'s own
steps run in this process against PostgreSQL (the ``db_url`` fixture)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from persistence.db import Database
from persistence.models import CheckUnit, Event
from persistence.repositories.units import RUNNING
from tests.service.helpers import chain_model, submit
from tests.service.in_process import one_check_context, start_here
from worker import unit_run
from worker.context import FarmSize, RunnerContext
from worker.finishing import FinishRun
from worker.run_job import FinishJob, RunCheck, take
from worker.unit_run import UnitTicket

MODEL = chain_model(48, 29).SerializeToString()  # a job of 8 checks or more (the data step is off by default)


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    yield from one_check_context(db_url, data_dir)


def _start(client: httpx.Client, ctx: RunnerContext) -> str:
    return start_here(client, ctx, MODEL)


def _first_check(ctx: RunnerContext) -> UnitTicket:
    taken = take(ctx)
    assert isinstance(taken, RunCheck)
    return taken.unit


def _running_units(db_url: str, job_id: str) -> list[tuple[int, str | None]]:
    database = Database(db_url)
    with database.session() as session:
        rows = session.query(CheckUnit).filter(CheckUnit.job_id == job_id, CheckUnit.status == RUNNING).all()
        running = [(row.id, row.worker) for row in rows]
    database.dispose()
    return running


def _check_started_events(db_url: str, job_id: str) -> int:
    database = Database(db_url)
    with database.session() as session:
        count = session.query(Event).filter(Event.job_id == job_id, Event.kind == "check_started").count()
    database.dispose()
    return count


def test_the_recording_worker_goes_straight_on_with_the_jobs_next_check(
    quiet_client: httpx.Client, db_url: str, ctx: RunnerContext
) -> None:
    job_id = _start(quiet_client, ctx)
    run: RunCheck | None = RunCheck(_first_check(ctx))
    claims = 1
    while run is not None:
        assert [unit_id for unit_id, _ in _running_units(db_url, job_id)] == [run.unit.id]
        run = run.run(ctx)
        if run is not None:  # claimed while recording: running under this worker's name, announced
            assert _running_units(db_url, job_id) == [(run.unit.id, ctx.worker)]
            claims += 1
            assert _check_started_events(db_url, job_id) == claims
    assert claims > 5, "every check after the first was claimed with the verdict before it"
    end = take(ctx)  # the job's end: its finish unit, taken like a check
    assert isinstance(end, FinishJob)
    FinishRun(ctx, end.finish).run()
    assert take(ctx) is None
    job = quiet_client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "succeeded" and job["nodes_after"] == 1
    numbers = [int(item["number"]) for item in quiet_client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]]
    assert numbers == list(range(1, len(numbers) + 1))


def test_another_jobs_work_sends_the_worker_back_to_fair_share(
    quiet_client: httpx.Client, db_url: str, ctx: RunnerContext
) -> None:
    first = _start(quiet_client, ctx)
    ticket = _first_check(ctx)
    second = str(submit(quiet_client, MODEL).json()["id"])  # queued: a job waiting to start
    assert RunCheck(ticket).run(ctx) is None
    assert _running_units(db_url, first) == []  # the first job's next check waits, queued
    taken = take(ctx)
    assert taken is not None and taken.job_id in (first, second)


STATEMENTS_PER_VERDICT = 10  # lock the job, finish the unit, its model's row, one survey (the checks
# in flight, other work?), queue the next, claim it, then at the commit: the new verdict cache
# entry, the events, the iteration, the job's row (its state, counters and lease) once; besides,
# the farm's live workers are read at most once a second (``worker.context.FarmSize``)


def test_a_verdict_costs_a_fixed_number_of_statements(
    quiet_client: httpx.Client, db_url: str, ctx: RunnerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted on this thread, which runs the checks and records them (not the lease renewals of
    the process's lease thread), with no cancel poll during a check (a slow one polls the job)."""
    monkeypatch.setattr(unit_run, "CANCEL_POLL_S", math.inf)
    _start(quiet_client, ctx)
    run = RunCheck(_first_check(ctx)).run(ctx)
    counts: list[int] = []
    statements: list[str] = []
    this_thread = threading.get_ident()

    def count(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if threading.get_ident() == this_thread:
            statements.append(statement.split("\n", 1)[0][:100])

    event.listen(ctx.db.engine, "before_cursor_execute", count)
    try:
        while run is not None:
            statements.clear()
            run = run.run(ctx)
            if run is not None:  # a verdict recorded and the next check claimed (the last one ends the job)
                counts.append(len([s for s in statements if not s.startswith("SELECT workers.")]))
                assert counts[-1] == STATEMENTS_PER_VERDICT, statements
    finally:
        event.remove(ctx.db.engine, "before_cursor_execute", count)
    assert len(counts) >= 4, counts  # the same for every verdict, however many came before


def test_the_farms_size_is_read_at_most_once_a_ttl() -> None:
    reads: list[str] = []

    def read(queue: str, count: int) -> Callable[[], int]:
        return lambda: reads.append(queue) or count

    size = FarmSize(ttl_s=3600)
    assert size.workers("cpu", read("cpu", 3)) == 3
    assert size.workers("cpu", read("cpu", 5)) == 3  # read a moment ago: kept
    assert size.workers("gpu", read("gpu", 1)) == 1  # each queue its own
    assert reads == ["cpu", "gpu"]
    fresh = FarmSize(ttl_s=0)
    assert fresh.workers("cpu", read("cpu", 3)) == 3 and fresh.workers("cpu", read("cpu", 5)) == 5

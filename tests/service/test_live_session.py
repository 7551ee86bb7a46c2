"""A job's session stays live in the worker between verdicts (``worker.live_session``): the worker
that advanced it last applies only the new verdict; a worker whose kept version is not the row's
(another worker advanced the job since: a takeover) rebuilds it from the stored state, or, when
it kept one, catches up with the verdicts stored since, and the job ends with the same answer.
Replays are counted by ``ctx.live.stats``, not timed. ``run_job``'s own
steps (``take``, ``start_job``, ``RunCheck``) run in this process against PostgreSQL; a
second worker is a second thread (each thread keeps its own prepared jobs and sessions)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import delete

from persistence.db import Database
from persistence.models import SessionVerdict
from persistence.repositories import JobRepository
from persistence.repositories.session_verdicts import SessionVerdictRepository
from tests.service.helpers import chain_model, read_sse, submit
from tests.service.in_process import one_check_context
from worker.context import RunnerContext
from worker.finishing import FinishRun
from worker.job_start import start_job
from worker.run_job import FinishJob, RunCheck, StartJob, take
from worker.unit_run import UnitTicket

MODEL = chain_model(12, 7).SerializeToString()


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    yield from one_check_context(db_url, data_dir)


def _start(client: httpx.Client, ctx: RunnerContext) -> str:
    """A linear job (a dozen checks: room for a takeover mid-job), started by this process."""
    job_id = str(submit(client, MODEL, mode="linear").json()["id"])
    started = take(ctx)
    assert isinstance(started, StartJob) and started.job_id == job_id
    start_job(ctx, job_id)
    return job_id


def _next_check(ctx: RunnerContext) -> UnitTicket | None:
    """The job's next check; None once none is left (its end, the finish unit, is run here then)."""
    taken = take(ctx)
    if taken is None:
        return None
    if isinstance(taken, FinishJob):
        FinishRun(ctx, taken.finish).run()
        return None
    assert isinstance(taken, RunCheck), "a job to start: only one job was submitted"
    return taken.unit


def _in_another_worker(ctx: RunnerContext, ticket: UnitTicket) -> None:
    failures: list[BaseException] = []

    def run() -> None:
        try:
            RunCheck(ticket).run(ctx, follow=False)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            failures.append(exc)

    thread = threading.Thread(target=run, name="another-worker")
    thread.start()
    thread.join(300)
    assert not thread.is_alive() and not failures, failures


def _answer(client: httpx.Client, job_id: str) -> tuple[str, int, list[str]]:
    job = client.get(f"/v1/jobs/{job_id}").json()
    ended = [e for e in read_sse(client, f"/v1/jobs/{job_id}/events") if e.kind == "job.succeeded"]
    return job["status"], job["nodes_after"], ended[0].data["min_bad_nodes"] if ended else []


def _state_version(db_url: str, job_id: str) -> int:
    database = Database(db_url)
    with database.session() as session:
        job = JobRepository(session).get(job_id)
        assert job is not None
        version = job.state_version
    database.dispose()
    return version


def test_the_worker_that_advanced_a_job_last_applies_only_the_new_verdict(
    client: httpx.Client, db_url: str, ctx: RunnerContext
) -> None:
    replays, reused = ctx.live.stats.replays, ctx.live.stats.reused
    job_id = _start(client, ctx)
    assert ctx.live.stats.replays == replays + 1  # the session is built once, at the start
    verdicts = 0
    while (ticket := _next_check(ctx)) is not None:
        RunCheck(ticket).run(ctx, follow=False)
        verdicts += 1
    assert verdicts > 5
    assert ctx.live.stats.replays == replays + 1, "a verdict (or the end) rebuilt the session although it was live"
    assert ctx.live.stats.reused == reused + verdicts + 1  # and the finish unit's, which reads the answer
    assert _state_version(db_url, job_id) == verdicts + 1  # one state write per verdict, and the start
    status, nodes, min_bad = _answer(client, job_id)
    assert status == "succeeded" and nodes == 1 and min_bad


def test_a_takeover_by_another_worker_replays_and_ends_with_the_same_answer(
    client: httpx.Client, ctx: RunnerContext
) -> None:
    alone = _start(client, ctx)
    while (ticket := _next_check(ctx)) is not None:
        RunCheck(ticket).run(ctx, follow=False)
    expected = _answer(client, alone)
    assert expected[0] == "succeeded"

    job_id = _start(client, ctx)
    for _ in range(3):
        ticket = _next_check(ctx)
        assert ticket is not None
        RunCheck(ticket).run(ctx, follow=False)
    replays = ctx.live.stats.replays
    ticket = _next_check(ctx)
    assert ticket is not None
    _in_another_worker(ctx, ticket)  # its own prepared job: it rebuilds the session
    assert ctx.live.stats.replays == replays + 1
    ticket = _next_check(ctx)
    assert ticket is not None
    caught_up = ctx.live.stats.caught_up
    RunCheck(ticket).run(ctx, follow=False)  # back here: the kept version is stale, so it catches up (no replay)
    assert ctx.live.stats.replays == replays + 1 and ctx.live.stats.caught_up == caught_up + 1
    reused = ctx.live.stats.reused
    while (ticket := _next_check(ctx)) is not None:
        RunCheck(ticket).run(ctx, follow=False)
    assert ctx.live.stats.replays == replays + 1 and ctx.live.stats.reused > reused  # live again from then on
    assert _answer(client, job_id) == expected
    numbers = [int(item["number"]) for item in client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]]
    assert numbers == list(range(1, len(numbers) + 1))


def _stored(db_url: str, job_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job's saved state and its verdict cache's rows."""
    database = Database(db_url)
    with database.session() as session:
        job = JobRepository(session).get(job_id)
        assert job is not None and job.session_state is not None
        state, rows = job.session_state, SessionVerdictRepository(session).of_job(job_id)
    database.dispose()
    return state, rows


def test_the_state_is_saved_without_its_verdicts_and_a_state_holding_them_resumes(
    client: httpx.Client, db_url: str, ctx: RunnerContext
) -> None:
    alone = _start(client, ctx)
    while (ticket := _next_check(ctx)) is not None:
        RunCheck(ticket).run(ctx, follow=False)
    expected = _answer(client, alone)

    job_id = _start(client, ctx)
    for _ in range(3):
        ticket = _next_check(ctx)
        assert ticket is not None
        RunCheck(ticket).run(ctx, follow=False)
    state, rows = _stored(db_url, job_id)
    assert state["cache"]["verdicts"] == {} and len(rows) >= 3  # one row a verdict, none inline
    database = Database(db_url)  # as a state saved before the rows existed: the verdicts inline
    with database.session() as session:
        job = JobRepository(session).get(job_id)
        assert job is not None
        job.session_state = {**state, "cache": {**state["cache"], "verdicts": rows}}
        job.state_version += 1  # written by "another worker": this one rebuilds the session
        session.execute(delete(SessionVerdict).where(SessionVerdict.job_id == job_id))
    database.dispose()
    while (ticket := _next_check(ctx)) is not None:
        RunCheck(ticket).run(ctx, follow=False)
    assert _answer(client, job_id) == expected
    checks = [client.get(f"/v1/jobs/{j}").json()["progress"]["checks_run"] for j in (alone, job_id)]
    assert checks[0] == checks[1], "the resumed session knew every verdict: no check ran twice"
    state, rows = _stored(db_url, job_id)
    assert state["cache"]["verdicts"] == {} and len(rows) > 3  # the inline ones moved to rows

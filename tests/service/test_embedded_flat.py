"""The embedded service's cost per verdict does not grow through a job (issue 32). Its two slots
(``LOCAL_WORKERS=2``, the default of ``make run``) are two processes that take one job's checks
in turn, so most verdicts are recorded by a process that did not record the one before: its kept
session is a version behind. It used to be rebuilt from the stored state, reading every verdict
row of the job and replaying them all (the cost grew with the job: 0.30 s a check around check
100, 0.87 s around check 1,500); now it catches up with the rows stored since it last looked.

Counted, not timed, on SQLite: the statements a verdict runs (the same at check 10 as at check
500, before as after: what grew was not their number) and the verdict rows it reads (what grew:
all of them at every verdict before). ``run_job``'s steps run in this process; each slot is a
thread of its own (each thread keeps its own prepared job and session, as each slot's process does)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session

from api.app import create_app
from api.settings import ApiSettings
from persistence.db import Database
from persistence.migrate import upgrade
from persistence.repositories import TeamRepository
from reducer_core.cache import VerdictCache
from reducer_core.config import SessionConfig
from reducer_core.graph import GraphIndex
from reducer_core.machine import ReductionMachine
from reducer_core.requests import CheckRequest
from reducer_core.verdict import Verdict, VerdictKind
from tests.service.conftest import client_for
from tests.service.helpers import chain_model, submit
from tests.service.in_process import in_process_context
from worker import unit_run
from worker.context import RunnerContext
from worker.job_start import start_job
from worker.run_job import RunCheck, StartJob, take

NODES, CULPRIT = 320, 213  # a linear job of 500+ checks
SPEC = f"kind: command\ncommand: [sh, -c, '! grep -q n{CULPRIT}_Mul \"$1\"', check, '{{model}}']\ntimeout: 60\n"
MEASURED = (10, 500)  # the verdicts compared


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'onnx-reducer.db'}"
    upgrade(url)
    return url


@pytest.fixture
def client(sqlite_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> Iterator[httpx.Client]:
    settings = ApiSettings(database_url=sqlite_url, data_dir=data_dir, allow_command_checks=True)
    url = serve_app(create_app(settings, enqueue=lambda job_id, queue: None))
    database = Database(sqlite_url)
    with database.session() as session:
        teams = TeamRepository(session)
        token = teams.create_token(teams.get_or_create("team-a"))
    database.dispose()
    with client_for(url, token) as made:
        yield made


@pytest.fixture
def ctx(sqlite_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    settings = {"max_workers_per_job": 1, "farm_verdict_cache": False, "allow_command_checks": True}
    yield from in_process_context(sqlite_url, data_dir, **settings)


class Counter:
    """Statements run and verdict rows read by one thread (the slot recording a verdict)."""

    def __init__(self) -> None:
        self.thread = 0
        self.statements: list[str] = []
        self.verdict_rows = 0

    def reset(self, thread: int) -> None:
        self.thread, self.statements, self.verdict_rows = thread, [], 0

    def statement(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if threading.get_ident() == self.thread and not statement.startswith("SELECT workers."):
            self.statements.append(statement.split("\n", 1)[0][:100])

    def rows(self, state: ORMExecuteState) -> Any:
        """Counts the rows of the job's verdict cache a select returns (and returns them)."""
        if (
            threading.get_ident() != self.thread
            or not state.is_select
            or "session_verdicts" not in str(state.statement)
        ):
            return None
        frozen = state.invoke_statement().freeze()
        self.verdict_rows += len(frozen().all())
        return frozen()


def test_a_verdict_costs_the_same_at_check_500_as_at_check_10_when_two_slots_take_turns(
    client: httpx.Client, ctx: RunnerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unit_run, "CANCEL_POLL_S", math.inf)  # no cancel poll during a check
    model = chain_model(NODES, CULPRIT).SerializeToString()
    job_id = str(submit(client, model, SPEC, mode="linear").json()["id"])
    slots = [ThreadPoolExecutor(max_workers=1) for _ in range(2)]  # one thread each, for the whole job
    counter = Counter()
    event.listen(ctx.db.engine, "before_cursor_execute", counter.statement)
    event.listen(Session, "do_orm_execute", counter.rows)
    measured: dict[int, tuple[int, int]] = {}
    try:
        taken = slots[0].submit(take, ctx).result()
        assert isinstance(taken, StartJob) and taken.job_id == job_id
        slots[0].submit(start_job, ctx, job_id).result()
        replays = ctx.live.stats.replays
        for verdict in range(1, max(MEASURED) + 1):
            slot = slots[verdict % 2]  # the slot that did not record the verdict before
            taken = slot.submit(take, ctx).result()
            assert isinstance(taken, RunCheck), f"the job ended after {verdict - 1} checks"
            counter.reset(slot.submit(threading.get_ident).result())
            assert slot.submit(taken.run, ctx, follow=False).result() is None
            if verdict in MEASURED:
                measured[verdict] = (len(counter.statements), counter.verdict_rows)
                counter.reset(0)
        replayed = ctx.live.stats.replays - replays
    finally:
        event.remove(Session, "do_orm_execute", counter.rows)
        event.remove(ctx.db.engine, "before_cursor_execute", counter.statement)
        for slot in slots:
            slot.shutdown()
    early, late = (measured[n] for n in MEASURED)
    assert late[0] == early[0], f"statements a verdict: {early[0]} at check 10, {late[0]} at check 500"
    assert late[1] == early[1], f"verdict rows read a verdict: {early[1]} at check 10, {late[1]} at check 500"
    assert late[1] <= 2  # what the other slot stored since this one last looked
    assert replayed <= 2, "each slot rebuilds the session once at most (then it catches up)"


def test_a_kept_session_caught_up_is_where_a_rebuilt_one_is() -> None:
    """Two slots take a job's verdicts in turn, as the service stores them (the state without its
    entries, the entries apart in the order written): at every verdict, the slot's kept session,
    caught up with the entries stored since it last looked, has the state and asks for the checks
    that a session rebuilt from the stored state (every entry replayed) has and asks for."""
    model = chain_model(20, 13)
    index = GraphIndex.build(model)
    config = SessionConfig(mode="linear")

    def new_cache() -> VerdictCache:
        return VerdictCache(index.fingerprint, "op-present:Mul")

    def verdict(request: CheckRequest) -> Verdict:
        failing = 13 in request.candidate.nodes
        return Verdict(VerdictKind.FAIL, "op-present:Mul") if failing else Verdict(VerdictKind.PASS)

    first = ReductionMachine(index, config, new_cache())
    in_flight = {request.id: request for request in first.next_requests(2)}
    rows: list[tuple[str, dict[str, Any]]] = list(first.cache.changed_since(0).items())
    stored, version = first.state(verdicts=False), 1
    kept: list[tuple[ReductionMachine, int, int] | None] = [(first, version, len(rows)), None]  # machine, version, seen
    turn = caught_up = 0
    while in_flight:
        turn += 1
        slot = turn % 2
        rebuilt = ReductionMachine.from_state(
            index, config, new_cache(), stored | {"cache": stored["cache"] | {"verdicts": dict(rows)}}
        )
        held = kept[slot]
        if held is None:
            machine = ReductionMachine.from_state(
                index, config, new_cache(), stored | {"cache": stored["cache"] | {"verdicts": dict(rows)}}
            )
        else:
            machine, held_version, seen = held
            if held_version != version:
                machine.catch_up(dict(rows[seen:]), stored)
                caught_up += 1
        assert machine.state() == rebuilt.state(), f"turn {turn}"
        assert machine.next_requests(2, list(in_flight)) == rebuilt.next_requests(2, list(in_flight))
        request = in_flight.pop(next(iter(in_flight)))  # the oldest check in flight ends
        assert isinstance(request, CheckRequest)  # an op-present check: no layerwise run
        mark = machine.cache.mark
        machine.deliver(request, verdict(request))
        if not machine.done:
            for new in machine.next_requests(2, list(in_flight)):
                in_flight[new.id] = new
        rows += list(machine.cache.changed_since(mark).items())
        stored, version = machine.state(verdicts=False), version + 1
        kept[slot] = (machine, version, len(rows))
    assert machine.done and machine.result.min_bad.nodes == frozenset({13})
    assert caught_up >= turn - 2, (caught_up, turn)  # every verdict but the first of each slot

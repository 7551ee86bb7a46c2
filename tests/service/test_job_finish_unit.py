"""A job's end is a unit of work like a check (``jobflow.ending.plan_end``, ``worker.finishing``),
with ``run_job`` (the worker's own code) against PostgreSQL: an end slower than the job's lease is
not taken for an abandoned job by an idle worker (the job succeeds once, at attempt 1, with its
bundle), and a speculative verdict that lands after the end is planned re-plans nothing (no model,
no bundle stored again, no final check run again)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from persistence.db import Database
from persistence.enums import ArtifactKind, JobStatus
from persistence.models import CheckUnit, utcnow
from persistence.repositories import ArtifactRepository, JobRepository
from persistence.repositories.units import UnitRepository
from tests.models import weighted_model
from tests.service.helpers import OP_PRESENT_MUL, chain_model, read_sse, submit, wait_job
from tests.service.in_process import in_process_context, start_here
from worker import final_checks
from worker.context import RunnerContext, slot_context
from worker.prepared import JobInput
from worker.run_job import run_job, waiting_job
from worker.stops import end_overdue_finishing
from worker.unit_run import KnownJob, RunCheck, UnitRun, UnitTicket

LEASE_S = 3.0
SELF_CHECK_S = 5.0  # longer than the lease: the end outlasts it


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    yield from in_process_context(db_url, data_dir, job_lease_s=LEASE_S)


def _second_worker(ctx: RunnerContext) -> RunnerContext:
    """Another worker of the same farm (its own name; a thread of its own keeps its own prepared jobs)."""
    return slot_context(ctx, f"{ctx.worker}-second")


class _Workers:
    """Workers that look for work until stopped (as an idle worker polls), one thread each."""

    def __init__(self, *contexts: RunnerContext) -> None:
        self.stop = threading.Event()
        self.failures: list[BaseException] = []
        self.threads = [threading.Thread(target=self._loop, args=(c,), name=c.worker) for c in contexts]

    def _loop(self, ctx: RunnerContext) -> None:
        try:
            while not self.stop.is_set():
                job_id = waiting_job(ctx)
                if job_id is None:
                    self.stop.wait(0.05)
                else:
                    run_job(job_id, ctx)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            self.failures.append(exc)

    def __enter__(self) -> _Workers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(120)
        assert not any(t.is_alive() for t in self.threads) and not self.failures, self.failures


def _slow_bundles(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundle's self-check (its repro.py runs) takes SELF_CHECK_S: longer than a job lease."""
    real: Callable[..., Any] = getattr(final_checks, "store_bundle")  # noqa: B009 - not exported

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(SELF_CHECK_S)  # the slow work itself (not a wait for anything)
        return real(*args, **kwargs)

    monkeypatch.setattr(final_checks, "store_bundle", slow)


def _counted(monkeypatch: pytest.MonkeyPatch, name: str, counts: dict[str, int]) -> None:
    real: Callable[..., Any] = getattr(final_checks, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        counts[name] = counts.get(name, 0) + 1
        return real(*args, **kwargs)

    monkeypatch.setattr(final_checks, name, counting)


ENDS = ("job.succeeded", "job.failed", "job.cancelled")


def _ends(client: httpx.Client, job_id: str) -> list[str]:
    """The job's terminal events (its stream ends with the first)."""
    return [e.kind for e in read_sse(client, f"/v1/jobs/{job_id}/events") if e.kind in ENDS]


def test_an_end_slower_than_the_lease_is_not_taken_for_an_abandoned_job(
    client: httpx.Client, ctx: RunnerContext, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _slow_bundles(monkeypatch)
    job_id = submit(client, weighted_model().SerializeToString(), OP_PRESENT_MUL).json()["id"]
    with _Workers(ctx, _second_worker(ctx)):
        job = wait_job(client, job_id, 300)
    assert job["status"] == "succeeded", job
    assert _ends(client, job_id) == ["job.succeeded"], "it ended once"
    kinds = [e.kind for e in read_sse(client, f"/v1/jobs/{job_id}/events")]
    assert kinds.count("job.finishing") == 1, kinds
    assert "iteration" not in kinds[kinds.index("job.finishing") :], "finishing comes after its last verdict"
    assert kinds[-1] == "job.succeeded", kinds
    with database.session() as session:
        row = JobRepository(session).get(job_id)
        assert row is not None and row.attempts == 1, "no worker took it again while it finished"
        assert ArtifactRepository(session).get(job_id, ArtifactKind.BUNDLE, ArtifactKind.BUNDLE.value) is not None
    assert client.get(f"/v1/jobs/{job_id}/bundle").status_code == 200


@pytest.mark.parametrize("cancelled_meanwhile", [False, True], ids=["unit-open", "unit-cancelled-by-the-plan"])
def test_a_late_speculative_verdict_re_plans_nothing(
    client: httpx.Client,
    ctx: RunnerContext,
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
    cancelled_meanwhile: bool,
) -> None:
    if cancelled_meanwhile:
        _cancel_after_the_check(monkeypatch, database)
    counts: dict[str, int] = {}
    for name in ("store_bundle", "store_final_models"):
        _counted(monkeypatch, name, counts)
    real_checks = final_checks._check_models
    late: list[BaseException] = []

    def final_checks_with_a_late_verdict(prepared: Any, finals: Any) -> None:
        counts["final checks"] = counts.get("final checks", 0) + 1
        if counts["final checks"] == 1:  # the end is planned: a speculative check lands now
            _late_verdict(_second_worker(ctx), database, finals.job_id, late)
        real_checks(prepared, finals)

    monkeypatch.setattr(final_checks, "_check_models", final_checks_with_a_late_verdict)
    job_id = submit(client, weighted_model().SerializeToString(), OP_PRESENT_MUL).json()["id"]
    run_job(job_id, ctx)
    assert not late, late
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    assert counts == {"store_bundle": 1, "store_final_models": 1, "final checks": 1}
    assert _ends(client, job_id) == ["job.succeeded"]
    rows = client.get(f"/v1/jobs/{job_id}/iterations", params={"limit": 1000}).json()["items"]
    late_rows = [r for r in rows if r["late"]]
    assert len(late_rows) == 1 and late_rows[0] == rows[-1], "the late verdict is recorded, after the others"
    assert late_rows[0]["verdict"] is not None and late_rows[0]["artifact"] is None, "its model is not stored"
    late_events = [e.data for e in read_sse(client, f"/v1/jobs/{job_id}/events") if e.data.get("late")]
    assert [e["number"] for e in late_events] == [late_rows[0]["number"]]
    progress = client.get(f"/v1/jobs/{job_id}").json()["progress"]
    assert progress["iteration"] == len(rows), "the job's iteration count agrees with its list"


def _cancel_after_the_check(monkeypatch: pytest.MonkeyPatch, database: Database) -> None:
    """The race as it happens: the check finished, and before its verdict is recorded the end is
    planned, which cancels the job's checks (its unit too)."""
    real: Callable[..., Any] = UnitRun._execute

    def execute_then_cancelled(run: UnitRun, *args: Any) -> Any:
        delivery = real(run, *args)
        if threading.current_thread().name != "late-check":
            return delivery  # the job's own checks
        with database.session() as session:
            unit = session.get(CheckUnit, run.ticket.id)
            assert unit is not None
            unit.status = "cancelled"
            session.commit()
        return delivery

    monkeypatch.setattr(UnitRun, "_execute", execute_then_cancelled)


def test_a_verdict_landing_after_the_job_ended_is_recorded_late_and_re_plans_nothing(
    client: httpx.Client, ctx: RunnerContext, database: Database
) -> None:
    job_id = submit(client, weighted_model().SerializeToString(), OP_PRESENT_MUL).json()["id"]
    run_job(job_id, ctx)
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    before = [e.kind for e in read_sse(client, f"/v1/jobs/{job_id}/events")]
    late: list[BaseException] = []
    _late_verdict(_second_worker(ctx), database, job_id, late, status="cancelled")  # as the end left it
    assert not late, late
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "succeeded" and _ends(client, job_id) == ["job.succeeded"]
    assert [e.kind for e in read_sse(client, f"/v1/jobs/{job_id}/events")] == before, "no event after the end"
    rows = client.get(f"/v1/jobs/{job_id}/iterations", params={"limit": 1000}).json()["items"]
    late_rows = [r for r in rows if r["late"]]
    assert len(late_rows) == 1 and late_rows[0] == rows[-1], "the late verdict is recorded, after the others"
    assert late_rows[0]["verdict"] is not None and late_rows[0]["artifact"] is None, "its model is not stored"
    assert job["progress"]["iteration"] == len(rows), "the job's iteration count agrees with its list"
    with database.session() as session:
        units = session.query(CheckUnit).filter_by(job_id=job_id, kind="finish").all()
        assert len(units) == 1, "the end is not planned again"


def _late_verdict(
    ctx: RunnerContext, database: Database, job_id: str, failures: list[BaseException], status: str = "running"
) -> None:
    """Another worker's speculative check of the job (claimed while the search ran, the same
    candidate as its last check) finishes and hands in its verdict, on a thread of its own;
    ``status``: its unit's, when the verdict lands."""
    with database.session() as session:
        checks = session.query(CheckUnit).filter_by(job_id=job_id, kind="check")
        last = checks.order_by(CheckUnit.id.desc()).first()
        assert last is not None
        unit = CheckUnit(
            job_id=job_id,
            request_id=f"{last.request_id}-late",
            kind=last.kind,
            number=last.number + 1,
            phase=last.phase,
            attempt=last.attempt,
            speculative=True,
            candidate=last.candidate,
            node_count=last.node_count,
            status=status,
            worker=ctx.worker,
            claimed_at=utcnow(),
            lease_expires_at=utcnow(),
        )
        session.add(unit)
        session.flush()  # its id (committed with the block)
        ticket = UnitTicket.of(unit)
        job = JobRepository(session).get(job_id)
        assert job is not None
        known = KnownJob(JobInput.of(session, job), None, time.monotonic())

    def run() -> None:
        try:
            RunCheck(ticket, known).run(ctx, follow=False)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            failures.append(exc)

    thread = threading.Thread(target=run, name="late-check")
    thread.start()
    thread.join(120)
    assert not thread.is_alive()


def test_a_job_s_end_is_logged_once_whichever_worker_ends_it(
    client: httpx.Client, ctx: RunnerContext, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        job_id = start_here(client, ctx, chain_model(6, 3).SerializeToString())  # this worker starts it
        run_job(job_id, _second_worker(ctx))  # another runs its checks and ends it
    ended = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"job {job_id} ended: ")]
    assert len(ended) == 1 and ended[0].startswith(f"job {job_id} ended: succeeded, team team-a, "), ended


def test_a_finishing_job_whose_finish_unit_nobody_claims_ends_at_its_time_limit(
    client: httpx.Client, ctx: RunnerContext, database: Database
) -> None:
    overdue = submit(client, chain_model(6, 3).SerializeToString(), OP_PRESENT_MUL).json()["id"]
    in_time = submit(client, chain_model(6, 3).SerializeToString(), OP_PRESENT_MUL).json()["id"]
    with database.session() as session:  # both finishing, their finish units queued and unclaimed
        for job_id, started in ((overdue, ctx.time_limit_s + 60), (in_time, 0.0)):
            job = JobRepository(session).get(job_id)
            assert job is not None
            job.status, job.started_at = JobStatus.FINISHING, utcnow() - timedelta(seconds=started)
            UnitRepository(session).add_finish(job_id)
        session.commit()
    assert end_overdue_finishing(ctx) == [overdue]  # what every worker's heartbeat looks for
    assert _ends(client, overdue) == ["job.failed"]
    assert client.get(f"/v1/jobs/{in_time}").json()["status"] == "finishing"
    with database.session() as session:
        ended = JobRepository(session).get(overdue)
        assert ended is not None and (ended.status, ended.error_code) == ("failed", "time-limit-exceeded")
        units = session.query(CheckUnit).filter_by(job_id=overdue).all()
        assert [u.status for u in units] == ["cancelled"], "its finish unit is no longer offered"

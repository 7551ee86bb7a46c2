"""The job lifecycle's edges, with ``run_job`` called directly (the worker's own code) against
PostgreSQL: the lease is renewed through a slow setup and a stale attempt writes nothing; a cancel
racing a claim has exactly one outcome; the time limit counts from the first start; scratch folders
go when a job ends; a check whose infrastructure keeps failing fails the job resumably."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import onnx
import pytest
from sqlalchemy import text

import worker.prepared as prepared_module
from examples.build_example_model import build_example_model
from persistence.db import Database
from persistence.repositories import ClaimResult, JobRepository
from tests.service.helpers import BrokenInfraCheck, submit
from worker.context import RunnerContext, context_from_settings
from worker.job_start import start_job
from worker.run_job import run_job
from worker.settings import WorkerSettings

EXAMPLE = build_example_model().SerializeToString()
SLEEP_CHECK = "kind: command\ncommand: [sleep, '300']\ntimeout: 600\n"


def _context(db_url: str, data_dir: Path, **settings: Any) -> RunnerContext:
    values: dict[str, Any] = {"job_lease_s": 60.0, "allow_command_checks": True} | settings
    return context_from_settings(WorkerSettings(database_url=db_url, data_dir=data_dir, **values))


def _job(database: Database, job_id: str) -> dict[str, Any]:
    with database.session() as session:
        job = JobRepository(session).get(job_id)
        assert job is not None
        return {column: getattr(job, column) for column in ("status", "attempts", "error_code", "checks_run")}


def _events(client: httpx.Client, job_id: str) -> list[str]:
    with client.stream("GET", f"/v1/jobs/{job_id}/events", params={"after": 0}, timeout=30) as response:
        return [line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event: ")]


def _wait(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _in_thread(target: Callable[[], Any]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def _slow_setup(monkeypatch: pytest.MonkeyPatch, gate: Callable[[], None]) -> None:
    """``load_workspace`` (shape inference, weights...) that takes as long as ``gate`` says."""
    real = prepared_module.load_workspace

    def slow(*args: Any, **kwargs: Any) -> Any:
        gate()
        return real(*args, **kwargs)

    monkeypatch.setattr(prepared_module, "load_workspace", slow)


# -- 4: the lease ----------------------------------------------------------------------------------


def test_lease_is_renewed_through_a_slow_setup(
    client: httpx.Client, database: Database, db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease_s = 2.0
    release = threading.Event()  # the setup lasts until the second claim was tried
    _slow_setup(monkeypatch, lambda: release.wait(120) and None)
    job_id = submit(client, EXAMPLE).json()["id"]
    ctx = _context(db_url, data_dir, job_lease_s=lease_s)
    first = _in_thread(lambda: run_job(job_id, ctx))
    _wait(lambda: _job(database, job_id)["status"] == "running")
    time.sleep(2.5 * lease_s)  # still in setup, well past one lease
    with database.session() as session:
        second = JobRepository(session).claim(job_id, lease_s, 3)
    release.set()
    first.join(120)
    ctx.db.dispose()
    assert second is ClaimResult.BUSY
    job = _job(database, job_id)
    assert (job["status"], job["attempts"]) == ("succeeded", 1)
    assert _events(client, job_id).count("job.started") == 1


def test_a_stale_attempt_writes_nothing(
    client: httpx.Client, database: Database, db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    _slow_setup(monkeypatch, lambda: release.wait(60) and None)
    job_id = submit(client, EXAMPLE).json()["id"]
    ctx = _context(db_url, data_dir, job_lease_s=1.0)
    stale = _in_thread(lambda: run_job(job_id, ctx))
    _wait(lambda: _job(database, job_id)["status"] == "running")
    with database.session() as session:  # its lease runs out and a second worker claims the job
        session.execute(
            text("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = :id"), {"id": job_id}
        )
        assert JobRepository(session).claim(job_id, 600, 3) is ClaimResult.CLAIMED
    release.set()
    stale.join(120)
    ctx.db.dispose()
    job = _job(database, job_id)
    assert (job["status"], job["attempts"], job["checks_run"]) == ("running", 2, 0)
    assert _iterations(database, job_id) == 0
    with database.session() as session:
        kinds = [k for (k,) in session.execute(text("SELECT kind FROM events WHERE job_id = :id"), {"id": job_id})]
    assert kinds == ["job.queued"]


def _iterations(database: Database, job_id: str) -> int:
    with database.session() as session:
        return int(
            session.execute(text("SELECT count(*) FROM iterations WHERE job_id = :id"), {"id": job_id}).scalar_one()
        )


# -- 5: scratch folders ----------------------------------------------------------------------------


def test_no_work_folder_remains_after_success_failure_or_cancel(
    client: httpx.Client, database: Database, db_url: str, data_dir: Path
) -> None:
    ctx = _context(db_url, data_dir)
    succeeded = submit(client, EXAMPLE).json()["id"]
    run_job(succeeded, ctx)  # a worker takes every job queued: one at a time here
    failed = submit(client, EXAMPLE, "kind: op-present\nops: [Conv]\n").json()["id"]
    run_job(failed, ctx)
    cancelled = submit(client, EXAMPLE, SLEEP_CHECK).json()["id"]
    runner = _in_thread(lambda: run_job(cancelled, ctx))
    _wait(lambda: len(client.get(f"/v1/jobs/{cancelled}").json()["checks_in_flight"]) == 1)  # its check runs
    assert client.post(f"/v1/jobs/{cancelled}/cancel").status_code == 202
    runner.join(60)
    ctx.db.dispose()
    assert [_job(database, j)["status"] for j in (succeeded, failed, cancelled)] == ["succeeded", "failed", "cancelled"]
    for job_id in (succeeded, failed, cancelled):
        assert not (data_dir / "jobs" / job_id / "work").exists(), job_id
        assert (data_dir / "jobs" / job_id / "model").is_dir()
    min_bad = client.get(f"/v1/jobs/{succeeded}/artifacts/min-bad")
    assert [n.op_type for n in onnx.load_from_string(min_bad.content).graph.node] == ["Mul"]
    assert client.get(f"/v1/jobs/{succeeded}/artifacts/iteration-1").status_code == 200


# -- 6: cancel racing a claim ----------------------------------------------------------------------


def test_cancel_racing_a_claim_leaves_one_outcome_and_one_terminal_event(
    client: httpx.Client, database: Database, db_url: str, data_dir: Path
) -> None:
    job_id = submit(client, EXAMPLE).json()["id"]
    answers: list[httpx.Response] = []
    with database.session() as session:  # a worker's claim, holding the row until it commits
        assert JobRepository(session).claim(job_id, 600, 3) is ClaimResult.CLAIMED
        canceller = _in_thread(lambda: answers.append(client.post(f"/v1/jobs/{job_id}/cancel")))
        _wait(lambda: _waiting_on_a_lock(database))  # the cancel read 'queued' and waits for the row
    canceller.join(30)
    assert answers[0].status_code == 202, answers[0].text
    assert _job(database, job_id)["status"] == "running"
    with database.session() as session:
        job = JobRepository(session).get(job_id)
        assert job is not None and job.started_at is not None
    ctx = _context(db_url, data_dir)
    start_job(ctx, job_id)  # the worker that claimed it goes on
    ctx.db.dispose()
    assert _job(database, job_id)["status"] == "cancelled"
    assert _events(client, job_id) == ["job.queued", "job.cancelled"]


def _waiting_on_a_lock(database: Database) -> bool:
    query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
    with database.session() as session:
        return int(session.execute(text(query)).scalar_one()) > 0


# -- 7: the time limit -----------------------------------------------------------------------------


def test_time_limit_counts_from_the_first_start(
    client: httpx.Client, database: Database, db_url: str, data_dir: Path
) -> None:
    job_id = submit(client, EXAMPLE).json()["id"]
    with database.session() as session:  # a first attempt started 100 s ago, and its worker died
        session.execute(
            text(
                "UPDATE jobs SET status = 'running', attempts = 1, started_at = now() - interval '100 seconds', "
                "lease_expires_at = now() - interval '1 second' WHERE id = :id"
            ),
            {"id": job_id},
        )
    ctx = _context(db_url, data_dir, job_time_limit_s=30.0)
    assert run_job(job_id, ctx) is ClaimResult.CLAIMED
    ctx.db.dispose()
    job = _job(database, job_id)
    assert (job["status"], job["error_code"], job["attempts"], job["checks_run"]) == (
        "failed",
        "time-limit-exceeded",
        2,
        0,
    )


# -- 8: a check whose infrastructure keeps failing -------------------------------------------------


def test_check_infra_error_fails_the_job_resumably(
    client: httpx.Client, database: Database, db_url: str, data_dir: Path, tmp_path: Path
) -> None:
    check = BrokenInfraCheck.make(tmp_path / "check-state")
    job_id = submit(client, EXAMPLE, check.spec, mode="linear").json()["id"]
    ctx = _context(db_url, data_dir)
    run_job(job_id, ctx)
    failed = client.get(f"/v1/jobs/{job_id}").json()
    assert (failed["status"], failed["error"]["code"]) == ("failed", "check-infra-error"), failed
    assert f"/v1/jobs/{job_id}/retry" in failed["error"]["message"]
    assert not (data_dir / "jobs" / job_id / "work").exists()

    check.fix()  # the operator fixes the check's infrastructure, then retries
    assert client.post(f"/v1/jobs/{job_id}/retry").status_code == 202
    assert client.post(f"/v1/jobs/{job_id}/retry").status_code == 409  # queued: nothing to retry
    run_job(job_id, ctx)
    ctx.db.dispose()
    job = client.get(f"/v1/jobs/{job_id}").json()
    iterations = client.get(f"/v1/jobs/{job_id}/iterations", params={"limit": 1000}).json()["items"]
    min_bad = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad").content
    assert job["status"] == "succeeded", job
    assert [n.op_type for n in onnx.load_from_string(min_bad).graph.node] == ["Mul"]
    checked = [it for it in iterations if it["cached"] is None]  # not the verdicts answered from the cache
    verdicts = [it["verdict"] for it in checked]
    assert verdicts[0] == "fail"  # the original, checked once: the retry resumed after it
    assert verdicts.count("infra-error") == 1 and "infra-error" not in verdicts[2:]
    assert checked[1]["fingerprint"] == checked[2]["fingerprint"]  # the retry re-ran that check
    assert _events(client, job_id).count("job.failed") == 1

"""The worker process's wake-up handler (``worker.process``) against a real SQLite database: a database error
that is not a lost connection is logged as what it was, not as an unreachable database."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from persistence.db import Database
from persistence.layout import DataLayout
from persistence.repositories import ClaimResult
from worker.context import RunnerContext
from worker.process import Delivery, WorkerProcess
from worker.settings import WorkerSettings


def test_a_database_error_is_logged_as_what_it_was(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = Database(f"sqlite:///{tmp_path / 'no-tables.db'}")  # reachable, but never migrated
    ctx = RunnerContext(
        db=db, layout=DataLayout(tmp_path), lease_s=60, max_attempts=3, time_limit_s=60, allow_command=False
    )
    try:
        with caplog.at_level(logging.WARNING, logger="onnx_reducer.worker"):
            delivery = WorkerProcess(WorkerSettings(worker_gpus=""), ctx, ["cpu"]).work("some-job")
    finally:
        db.dispose()
    assert delivery is Delivery.NO_DATABASE  # the work stays where it is
    assert "unreachable" not in caplog.text
    assert "the database refused a statement (OperationalError: no such table" in caplog.text


def test_a_worker_with_work_in_hand_is_busy_to_a_poll_and_takes_the_next_wake_up_after_it(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'no-tables.db'}")
    ctx = RunnerContext(
        db=db, layout=DataLayout(tmp_path), lease_s=60, max_attempts=3, time_limit_s=60, allow_command=False
    )
    process = WorkerProcess(WorkerSettings(worker_gpus=""), ctx, ["cpu"])
    working, done = threading.Event(), threading.Event()

    def run_job(job_id: str, _: RunnerContext) -> ClaimResult:
        working.set()
        done.wait(30)
        return ClaimResult.CLAIMED

    process.run_elsewhere = run_job
    first = threading.Thread(target=process.work, args=("job-a",))
    first.start()
    try:
        assert working.wait(30)
        assert process.work("job-b", wait=False) is Delivery.BUSY  # the poll's way: it skips its turn
        assert process.poll() is None  # busy: it does not even look
        assert process.activity.current_job == "job-a"
    finally:
        done.set()
        first.join(30)
        db.dispose()
    assert process.work("job-b") is Delivery.RAN  # the work in hand is done: the next wake-up is taken
    status = process.activity.status(process.identity)
    assert (status.current_job_id, status.jobs_done) == (None, 2)

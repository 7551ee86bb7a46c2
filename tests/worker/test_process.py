"""The worker process's wake-up handler (``worker.process``) against a real SQLite database: a database error
that is not a lost connection is logged as what it was, not as an unreachable database."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from persistence.db import Database
from persistence.layout import DataLayout
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
            delivery = WorkerProcess(WorkerSettings(worker_gpus=""), ctx, ["cpu"]).handle("some-job")
    finally:
        db.dispose()
    assert delivery is Delivery.NO_DATABASE  # the work stays where it is
    assert "unreachable" not in caplog.text
    assert "the database refused a statement (OperationalError: no such table" in caplog.text

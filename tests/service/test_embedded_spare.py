"""Issue 27: an idle embedded server starts an upload's job without setting anything up first. A
slot's spare job process (``worker.local_child``, started ahead by ``worker.local.LocalRunner``) is
given the settings as it starts and sets itself up before any job comes: connected to the
database, one look at the queue, then ``READY``; the upload's wake-up (the job id on its stdin)
leaves it the claim. It used to wait for the job id first and only then read its settings, connect
and compile its first take. Waits on the spare's output and exit (events), never on time."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from persistence.db import Database
from persistence.enums import JobStatus
from persistence.migrate import upgrade
from persistence.models import Job
from persistence.repositories import ClaimResult, TeamRepository
from tests.service.helpers import stored_job
from worker.local_child import READY
from worker.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
PATIENCE_S = 120.0  # how long a loaded machine may take to start a Python process (a failure's bound only)


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    path = tmp_path / "onnx-reducer.db"
    upgrade(f"sqlite:///{path}")
    return path


def _spare(database_url: str, data_dir: Path) -> subprocess.Popen[str]:
    """A spare as the server starts one: ``-`` for the job id, the settings on stdin's first line."""
    command = [sys.executable, "-m", "worker.local_child", "-"]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    assert child.stdin is not None
    child.stdin.write(WorkerSettings(database_url=database_url, data_dir=data_dir).model_dump_json() + "\n")
    child.stdin.flush()
    return child


def _first_line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], PATIENCE_S)
    return child.stdout.readline().strip() if readable else ""


def _open_files(pid: int) -> set[str]:
    folder = Path(f"/proc/{pid}/fd")
    return {os.readlink(folder / fd) for fd in os.listdir(folder) if (folder / fd).is_symlink()}


def test_a_spare_is_connected_before_its_job_comes_and_the_wake_up_starts_the_job(
    sqlite_path: Path, data_dir: Path
) -> None:
    url = f"sqlite:///{sqlite_path}"
    child = _spare(url, data_dir)
    try:
        assert _first_line(child) == READY, "the spare said nothing before it was given a job"
        assert str(sqlite_path) in _open_files(child.pid), "a ready spare holds the database open"
        database = Database(url)
        with database.session() as session:  # the upload: committed, then the wake-up
            job_id = stored_job(session, TeamRepository(session).get_or_create("team-a").id).id
        output, _ = child.communicate(job_id + "\n", timeout=PATIENCE_S)
        assert child.returncode == 0
        assert output.strip().splitlines()[-1] == ClaimResult.CLAIMED.value
        with database.session() as session:
            job = session.get(Job, job_id)
            assert job is not None and job.started_at is not None and job.attempts == 1
            assert job.status is not JobStatus.QUEUED  # its model is nowhere on disk: it started and failed
        database.dispose()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

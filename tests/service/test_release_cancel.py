"""A bisect-releases job cancelled while one of its releases is checked, whose next release another
worker must run (``worker.release_job._hand_over``): it ends cancelled, and is not queued again
with its cancel flag (no claim takes a cancelled job: it waited queued for ever). ``run_job``'s
own steps run in this process against PostgreSQL; the api is a real process."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import onnxruntime
import pytest

from examples.build_example_model import build_example_model
from persistence.db import Database
from persistence.models import Job
from tests.service.conftest import client_for
from tests.service.helpers import submit
from tests.service.in_process import in_process_context
from worker.context import RunnerContext
from worker.job_start import start_job
from worker.run_job import take

OWN = onnxruntime.__version__  # this process's release: the first (newest) one checked
OTHER = "1.0.0"  # older, offered by no worker here: the job is handed on for it


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    yield from in_process_context(db_url, data_dir, allow_command_checks=True, farm_verdict_cache=False)


def _waiting_check(folder: Path) -> str:
    """A command check that says it started, fails once the test lets it go on (the search then
    wants the older release)."""
    program = (
        "import pathlib, sys, time; "
        f"pathlib.Path({str(folder / 'started')!r}).touch(); "
        f"go = pathlib.Path({str(folder / 'go')!r}); "
        "[time.sleep(0.05) for _ in iter(lambda: go.exists(), True)]; sys.exit(1)"
    )
    return json.dumps({"kind": "command", "command": [sys.executable, "-c", program]})


def _wait_for(path: Path, thread: threading.Thread) -> None:
    event = threading.Event()
    while not path.exists():
        assert thread.is_alive(), "the job's run ended before its check started"
        event.wait(0.05)


def test_a_cancel_during_a_release_check_ends_the_job_instead_of_queueing_it_again(
    command_api_url: str, tokens: dict[str, str], ctx: RunnerContext, db_url: str, tmp_path: Path
) -> None:
    with client_for(command_api_url, tokens["team-a"]) as client:
        spec = _waiting_check(tmp_path)
        model = build_example_model().SerializeToString()
        answer = submit(client, model, spec, task="bisect-releases", releases=f"{OTHER},{OWN}")
        assert answer.status_code == 202, answer.text
        job_id = answer.json()["id"]
        taken = take(ctx)
        assert taken is not None and taken.job_id == job_id
        errors: list[BaseException] = []

        def run() -> None:
            try:
                start_job(ctx, job_id)
            except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
                errors.append(exc)

        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        try:
            _wait_for(tmp_path / "started", runner)
            cancelled = client.post(f"/v1/jobs/{job_id}/cancel")
            assert cancelled.status_code == 202 and cancelled.json()["status"] == "running", cancelled.text
        finally:
            (tmp_path / "go").touch()
            runner.join(timeout=120)
        assert not runner.is_alive() and errors == []
        job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "cancelled", job
    database = Database(db_url)
    with database.session() as session:
        row = session.get(Job, job_id)
        assert row is not None and row.check_spec == spec  # the user's spec, not one requiring OTHER
    database.dispose()

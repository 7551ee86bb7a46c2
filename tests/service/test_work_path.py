"""The path a verdict takes from the worker process to where it is stored: ``WorkerProcess.work``
runs the work loop itself (``take`` -> ``claim.run``), the claim runs its transaction in place
(``persistence.retry.attempts``: no frame of its own) and hands the verdict to
``jobflow.advance.deliver_check``, which records it through ``jobflow.recording`` (issue 27: at
most 4 calls from the Celery task, whose one call is ``work``). Counted on the real stack, while a
real job's checks are recorded (PostgreSQL: the ``db_url`` fixture), not read from the code."""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from persistence.repositories import IterationRepository
from tests.service.helpers import chain_model
from tests.service.in_process import one_check_context, start_here
from worker.context import RunnerContext
from worker.process import Delivery, WorkerProcess
from worker.settings import WorkerSettings

MODEL = chain_model(12, 7).SerializeToString()
CALLS_FROM_THE_TASK = 4  # the task's own call (``work``) included


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    yield from one_check_context(db_url, data_dir)


def calls_from_work_to(module: str, stack: traceback.StackSummary) -> int:
    """The calls from ``WorkerProcess.work`` to the first frame in ``module`` (a path such as
    ``jobflow/recording.py``), ``work`` itself not counted; every frame of the project's own code
    between them counts (a library's frames do not: a context manager's, a lock's)."""
    start = max(i for i, frame in enumerate(stack) if frame.name == "work" and frame.filename.endswith("process.py"))
    calls = 0
    for frame in stack[start + 1 :]:
        place = Path(frame.filename).as_posix()
        if "/site-packages/" in place or "/lib/python" in place:
            continue
        calls += 1
        if place.endswith(module):
            return calls
    raise AssertionError(f"no frame of {module} on the stack")


def test_a_verdict_is_stored_in_four_calls_from_the_task(
    quiet_client: httpx.Client, ctx: RunnerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = start_here(quiet_client, ctx, MODEL)  # its checks are queued: the work loop records their verdicts
    stacks: list[traceback.StackSummary] = []

    finish = IterationRepository.finish

    def finished(*args: Any) -> None:  # a checked verdict's row, written by jobflow.recording.record_iteration
        stacks.append(traceback.extract_stack())
        finish(*args)

    monkeypatch.setattr(IterationRepository, "finish", finished)
    process = WorkerProcess(WorkerSettings(worker_gpus=""), ctx, ["cpu"])
    assert process.work(job_id) is Delivery.RAN
    assert quiet_client.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    assert stacks, "no verdict was recorded"
    for stack in stacks:
        path = [f"{Path(frame.filename).name}:{frame.name}" for frame in stack[-8:]]
        assert 1 + calls_from_work_to("jobflow/advance.py", stack) <= 3, path
        assert 1 + calls_from_work_to("jobflow/recording.py", stack) <= CALLS_FROM_THE_TASK, path

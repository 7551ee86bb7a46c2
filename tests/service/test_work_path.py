"""The path a verdict takes from the worker process to ``jobflow``: ``WorkerProcess.work`` runs the
work loop itself (``take`` -> ``claim.run``), the claim opens the transaction and hands the verdict
to ``jobflow.advance.deliver_check`` (issue 27: at most 4 calls from the Celery task, whose one
call is ``work``). Counted on the real stack, while a real job's checks are recorded (PostgreSQL:
the ``db_url`` fixture), not read from the code."""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobflow.recording import record_iteration
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


def calls_from_work_to_jobflow(stack: traceback.StackSummary) -> int:
    """The calls from ``WorkerProcess.work`` to the first frame in ``jobflow/``; the frames of
    ``persistence/retry.py`` count as one call (``transaction``, which retries its work)."""
    start = max(i for i, frame in enumerate(stack) if frame.name == "work" and frame.filename.endswith("process.py"))
    calls = 0
    previous = ""
    for frame in stack[start + 1 :]:
        place = Path(frame.filename).as_posix()
        if "/jobflow/" in place:
            return calls + 1
        if place.endswith("persistence/retry.py") and previous.endswith("persistence/retry.py"):
            continue
        if "/site-packages/" not in place and "/lib/python" not in place:
            calls += 1
        previous = place
    raise AssertionError("no jobflow frame on the stack")


def test_a_verdict_reaches_jobflow_in_four_calls_from_the_task(
    quiet_client: httpx.Client, ctx: RunnerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = start_here(quiet_client, ctx, MODEL)  # its checks are queued: the work loop records their verdicts
    stacks: list[traceback.StackSummary] = []

    def recorded(*args: Any) -> int:
        stacks.append(traceback.extract_stack())
        return record_iteration(*args)

    monkeypatch.setattr("jobflow.advance.record_iteration", recorded)
    process = WorkerProcess(WorkerSettings(worker_gpus=""), ctx, ["cpu"])
    assert process.work(job_id) is Delivery.RAN
    assert quiet_client.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    assert stacks, "no verdict was recorded"
    depths = {1 + calls_from_work_to_jobflow(stack) for stack in stacks}
    path = [f"{Path(frame.filename).name}:{frame.name}" for frame in stacks[0][-14:]]
    assert max(depths) <= CALLS_FROM_THE_TASK, path

"""Crash and resume: SIGKILL the Celery worker in the middle of a reduction, start a new one; the
job completes (its check runs again, or the job is taken again as a whole) with the same result,
no iteration is recorded twice and no finished check runs again (the checks run are exactly the
engine's own sequence). An SSE client that reconnects with
``Last-Event-ID`` across the crash receives every later event exactly once."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from checks.spec import parse_check_spec
from engine.session import resolve_config
from engine.workspace import ReduceOptions, load_workspace
from jobflow.reduction import job_config
from reducer_core.cache import VerdictCache
from reducer_core.driver import drive
from reducer_core.machine import ReductionMachine
from reducer_core.requests import CheckRequest, Request
from reducer_core.verdict import Verdict, VerdictKind
from tests.service.conftest import Processes, client_for
from tests.service.helpers import OP_PRESENT_MUL, SseEvent, chain_model, read_sse, submit, wait_job

pytestmark = pytest.mark.slow
KILL_AFTER = 4


class _Quiet:
    def info(self, message: str) -> None:
        pass

    def warning(self, message: str) -> None:
        pass


def engine_sequence(model: onnx.ModelProto, tmp_path: Path, mode: str) -> list[str]:
    """The fingerprints the engine checks, in order, when 'Mul present' is the failure."""
    path = tmp_path / "reference.onnx"
    onnx.save(model, path)
    workspace = load_workspace(ReduceOptions(model=path, work_dir=tmp_path / "reference"), _Quiet())
    index = workspace.index
    seen: list[str] = []

    def answer(request: Request) -> Verdict:
        assert isinstance(request, CheckRequest)
        seen.append(request.candidate.fingerprint)
        has_mul = any(index.nodes[n].op_type == "Mul" for n in request.candidate.nodes)
        return Verdict(VerdictKind.FAIL, "op-present:Mul") if has_mul else Verdict(VerdictKind.PASS)

    # the service's own session options (an op-present spec does not localise)
    config = resolve_config(job_config(mode, {}), parse_check_spec(OP_PRESENT_MUL))
    drive(ReductionMachine(index, config, VerdictCache(index.fingerprint, "reference")), answer)
    workspace.close()
    return seen


def test_worker_killed_mid_reduction_resumes_without_rerunning_checks(
    api_url: str, processes: Processes, tokens: dict[str, str], tmp_path: Path
) -> None:
    model = chain_model(length=16, mul_at=10)
    expected = engine_sequence(model, tmp_path, "linear")  # linear: one check per node, many iterations
    assert len(expected) > KILL_AFTER + 3
    worker = processes.worker(MAX_WORKERS_PER_JOB="1")  # one check at a time: the engine's own order
    token = tokens["team-a"]
    with client_for(api_url, token) as client:
        response = submit(client, model.SerializeToString(), mode="linear")
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        url = f"/v1/jobs/{job_id}/events"

        def kill_point(event: SseEvent) -> bool:
            return event.kind == "iteration" and event.data["number"] == KILL_AFTER

        before = list(read_sse(client, url, stop=kill_point))
        worker.kill()
        processes.worker(MAX_WORKERS_PER_JOB="1")
        after = list(read_sse(client, url, last_event_id=before[-1].id))
        job = wait_job(client, job_id)
        iterations = client.get(f"/v1/jobs/{job_id}/iterations", params={"limit": 1000}).json()["items"]
        min_bad = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad").content
        full = list(read_sse(client, url))

    assert job["status"] == "succeeded", job
    # the killed worker's check is queued again (its lease ran out), or, when nothing of the job was
    # queued or running any more, the whole job is taken again (a second attempt)
    assert job["attempts"] in (1, 2)
    assert [n.op_type for n in onnx.load_from_string(min_bad).graph.node] == ["Mul"]
    assert [it["number"] for it in iterations] == list(range(1, len(iterations) + 1))
    assert [it["fingerprint"] for it in iterations if it["cached"] is None] == expected  # the checks
    assert all(it["cached"] == "job" for it in iterations if it["cached"] is not None)  # no farm yet
    assert not any(it["pending"] for it in iterations)
    assert job["progress"]["checks_run"] == len(expected)

    resumed_ids = [e.id for e in after]
    assert resumed_ids == list(range(before[-1].id + 1, full[-1].id + 1))
    assert [e.id for e in before] + resumed_ids == [e.id for e in full]
    started = [e for e in full if e.kind == "job.started"]
    assert [e.data["resumed"] for e in started] == [False, True][: job["attempts"]]
    numbers = [e.data["number"] for e in full if e.kind == "iteration"]
    assert numbers == list(range(1, len(iterations) + 1))

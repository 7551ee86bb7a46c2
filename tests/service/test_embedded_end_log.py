"""Issue 27: the embedded server (``make run``: the api, its slots and their job processes, all
writing one log) logs one line per job end with its outcome: a job that succeeds, one that fails
(its original model passes the check) and three cancelled while they run or wait. Each line is
awaited (written just after the end's commit, by whichever process ended the job); the server is
then stopped, so a second line for any job would be in the log too."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.service.conftest import client_for
from tests.service.embedded import embedded_server
from tests.service.helpers import chain_model, submit, wait_job

pytestmark = pytest.mark.slow

LINE_S = 60.0  # how long the line may follow the job's end on a loaded machine (a failure's bound only)
NO_SOFTMAX = "kind: op-present\nops: [Softmax]\n"  # the chain has none: its original passes


def _cancelled_while_it_runs(client: httpx.Client, model: bytes) -> str:
    job_id: str = submit(client, model, mode="linear").json()["id"]
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code < 300
    return job_id


def test_each_job_end_is_one_log_line_with_its_outcome(tmp_path: Path) -> None:
    with embedded_server(tmp_path) as server:
        with client_for(server.url, server.token) as client:
            succeeded = submit(client, chain_model(6, 3).SerializeToString()).json()["id"]
            failed = submit(client, chain_model(7, 3).SerializeToString(), NO_SOFTMAX).json()["id"]
            long_chains = [chain_model(300 + i, 200).SerializeToString() for i in range(3)]
            cancelled = [_cancelled_while_it_runs(client, model) for model in long_chains]
            outcomes = {job_id: wait_job(client, job_id)["status"] for job_id in [succeeded, failed, *cancelled]}
        assert outcomes == {succeeded: "succeeded", failed: "failed"} | dict.fromkeys(cancelled, "cancelled")
        for job_id in outcomes:
            server.proc.wait_for(f"job {job_id} ended: ", timeout=LINE_S)
    log = server.proc.output()  # the server and its job processes have stopped
    for job_id, status in outcomes.items():
        lines = re.findall(rf"job {job_id} ended: .*", log)
        assert len(lines) == 1, (job_id, lines)
        assert lines[0].startswith(f"job {job_id} ended: {status}"), lines

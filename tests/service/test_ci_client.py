"""The CI client (`onnx-reducer submit | status | download | cancel | retry | jobs`, run as the
console script) against the api over HTTP with PostgreSQL, Redis and a real Celery worker: exit codes
for each way a job ends, results in the output folder, an event stream cut mid-event that resumes
without losing or repeating an iteration, and an upload whose answer is lost, retried with the same
Idempotency-Key, that creates one job."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import pytest

from examples.build_example_model import build_example_model
from tests.service.conftest import Processes, client_for
from tests.service.helpers import (
    OP_PRESENT_MUL,
    BrokenInfraCheck,
    chain_model,
    free_port,
    model_with_weights_next_to_it,
    wait_http,
)
from tests.service.proxy import breaking_proxy

pytestmark = pytest.mark.slow

SPEC_CONV = "kind: op-present\nops: [Conv]\n"  # the reference example has no Conv: it does not fail


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.out)
        return data

    def iteration_numbers(self) -> list[int]:
        return [int(n) for n in re.findall(r"^\[I\] iteration +(\d+) \|", self.err, re.MULTILINE)]


@dataclass
class Cli:
    folder: Path
    server: str
    token: str

    def env(self) -> dict[str, str]:
        return {**os.environ, "ONNX_REDUCER_SERVER": self.server, "ONNX_REDUCER_TOKEN": self.token}

    def run(self, *args: str, timeout: float = 240) -> Result:
        done = subprocess.run(
            ["onnx-reducer", *args],
            cwd=self.folder,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["onnx-reducer", *args],
            cwd=self.folder,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def write(self, name: str, content: bytes | str) -> str:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content)
        else:
            path.write_bytes(content)
        return name


@pytest.fixture
def cli(api_url: str, tokens: dict[str, str], tmp_path: Path) -> Cli:
    folder = tmp_path / "ci"
    folder.mkdir()
    return Cli(folder, api_url, tokens["team-a"])


def _jobs(cli: Cli) -> list[dict[str, Any]]:
    with client_for(cli.server, cli.token) as client:
        items: list[dict[str, Any]] = client.get("/v1/jobs").json()["items"]
    return items


def _ops(path: Path) -> list[str]:
    return [node.op_type for node in onnx.load(str(path)).graph.node]


def test_submit_wait_reduces_the_reference_example(cli: Cli, processes: Processes) -> None:
    processes.worker()
    cli.write("model.onnx", build_example_model().SerializeToString())
    cli.write("spec.yaml", OP_PRESENT_MUL)
    result = cli.run("submit", "model.onnx", "--check-spec", "spec.yaml", "--wait", "-o", "out", "--json")

    assert result.code == 0, result.err
    summary = result.json()
    job_id = summary["job_id"]
    assert summary["status"] == "succeeded" and summary["exit_code"] == 0 and summary["error"] is None
    assert (summary["nodes_before"], summary["nodes_after"]) == (5, 1)
    assert summary["url"] == f"{cli.server}/#/jobs/{job_id}"
    assert summary["files"] == ["out/min-bad.onnx", "out/min-good.onnx"]
    assert _ops(cli.folder / "out" / "min-bad.onnx") == ["Mul"]
    assert (cli.folder / "out" / "min-good.onnx").stat().st_size > 0
    assert result.iteration_numbers() == list(range(1, summary["checks_run"] + summary["cache_hits"] + 1))

    status = cli.run("status", summary["api_url"])
    assert status.code == 0 and f"job {job_id}: succeeded" in status.out
    listed = cli.run("jobs", "--json")
    assert [job["id"] for job in listed.json()["jobs"]] == [job_id]
    again = cli.run("download", job_id, "-o", "again")
    assert again.code == 0, again.err
    assert (cli.folder / "again" / "min-bad.onnx").read_bytes() == (cli.folder / "out" / "min-bad.onnx").read_bytes()


def _input_shapes(path: Path) -> list[list[int]]:
    model = onnx.load(str(path))
    return [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input]


def test_reduce_data_is_opt_in_and_an_op_present_job_skips_it(cli: Cli, processes: Processes) -> None:
    """``submit`` leaves ``reduce_data`` off (the server's default), ``--reduce-data`` sends
    ``reduce_data=true`` and ``--no-reduce-data`` false: each job stores it. An op-present check
    reads no values, so even the job that asked for it keeps the input sizes."""
    processes.worker()
    cli.write("model.onnx", build_example_model().SerializeToString())
    cli.write("spec.yaml", OP_PRESENT_MUL)
    runs = {
        name: cli.run("submit", "model.onnx", "--check-spec", "spec.yaml", *flag, "--wait", "-o", name, "--json")
        for name, flag in (("plain", []), ("asked", ["--reduce-data"]), ("kept", ["--no-reduce-data"]))
    }
    assert all(r.code == 0 for r in runs.values()), {name: r.err for name, r in runs.items()}
    with client_for(cli.server, cli.token) as client:
        options = {
            name: client.get(f"/v1/jobs/{r.json()['job_id']}").json()["options"]["reduce_data"]
            for name, r in runs.items()
        }
    assert options == {"plain": False, "asked": True, "kept": False}
    shapes = {name: _input_shapes(cli.folder / name / "min-bad.onnx") for name in runs}
    assert all(_ops(cli.folder / name / "min-bad.onnx") == ["Mul"] for name in runs)
    assert shapes["asked"] == shapes["plain"] == shapes["kept"]  # nothing shrank


def test_external_data_is_bundled_and_a_model_that_does_not_fail_exits_3(cli: Cli, processes: Processes) -> None:
    processes.worker()
    model = model_with_weights_next_to_it(cli.folder)
    cli.write("spec.yaml", OP_PRESENT_MUL)
    result = cli.run("submit", model.name, "--check-spec", "spec.yaml", "--wait", "-o", "out", "--json")
    assert result.code == 0, result.err
    assert "sent together as model.tar" in result.err
    assert _ops(cli.folder / "out" / "min-bad.onnx") == ["Mul"]
    first = cli.run("download", result.json()["job_id"], "--artifact", "iteration-1", "-o", "iterations")
    assert first.code == 0, first.err
    assert (cli.folder / "iterations" / "iteration-1.tar").is_file()  # the model and its weight file

    cli.write("conv.yaml", SPEC_CONV)
    cli.write("example.onnx", build_example_model().SerializeToString())
    passed = cli.run("submit", "example.onnx", "--check-spec", "conv.yaml", "--wait", "-o", "none", "--json")
    assert passed.code == 3, passed.err
    assert passed.json()["error"]["code"] == "original-did-not-fail"
    assert not (cli.folder / "none").exists()
    assert cli.run("status", passed.json()["job_id"]).code == 3


def test_refused_submissions_exit_2_4_or_9_and_create_no_job(cli: Cli) -> None:
    cli.write("spec.yaml", OP_PRESENT_MUL)
    cli.write("broken.onnx", b"\x08\x07this is not a protobuf model")
    invalid = cli.run("submit", "broken.onnx", "--check-spec", "spec.yaml", "--json")
    assert invalid.code == 4, invalid.err
    assert invalid.json()["error"]["title"] == "Invalid model"

    cli.write("model.onnx", build_example_model().SerializeToString())
    cli.write("bad-spec.yaml", "kind: op-present\nops: []\n")
    refused = cli.run("submit", "model.onnx", "--check-spec", "bad-spec.yaml", "--json")
    assert refused.code == 2, refused.err
    assert refused.json()["error"]["title"] == "Invalid check spec"

    folder = cli.folder / "weights-missing"
    folder.mkdir()
    (model_with_weights_next_to_it(folder).parent / "weights.bin").unlink()
    missing = cli.run("submit", "weights-missing/model.onnx", "--check-spec", "spec.yaml")
    assert missing.code == 4 and "weights.bin" in missing.err

    auth = cli.run("submit", "model.onnx", "--check-spec", "spec.yaml", "--token", "not-a-token")
    assert auth.code == 9 and "token" in auth.err
    assert cli.run("status", "0" * 32).code == 2
    assert _jobs(cli) == []


def test_timeout_leaves_the_job_running_with_exit_7_and_cancel_gives_6(cli: Cli) -> None:
    """No worker runs: jobs stay queued."""
    cli.write("model.onnx", build_example_model().SerializeToString())
    cli.write("spec.yaml", OP_PRESENT_MUL)
    waited = cli.run("submit", "model.onnx", "--check-spec", "spec.yaml", "--wait", "--timeout", "2", "--json")
    assert waited.code == 7, waited.err
    job_id = waited.json()["job_id"]
    assert waited.json()["status"] == "queued"
    assert cli.run("status", job_id).code == 7

    follower = cli.start("status", job_id, "--wait", "--json")
    time.sleep(1.5)
    assert cli.run("cancel", job_id).code == 0
    out, err = follower.communicate(timeout=60)
    assert follower.returncode == 6, err
    assert json.loads(out)["status"] == "cancelled"
    assert cli.run("status", job_id).code == 6


def test_a_dropped_event_stream_resumes_without_losing_or_repeating_events(
    cli: Cli, processes: Processes, tokens: dict[str, str]
) -> None:
    processes.worker()
    cli.write("chain.onnx", chain_model(length=12, mul_at=7).SerializeToString())
    cli.write("spec.yaml", OP_PRESENT_MUL)
    with breaking_proxy(cli.server, cut_first_event_stream=True) as proxy:
        result = Cli(cli.folder, proxy.url, cli.token).run(
            "submit", "chain.onnx", "--check-spec", "spec.yaml", "--mode", "linear", "--wait", "-o", "out", "--json"
        )
        streams = proxy.requests_to("GET", "/events")

    assert result.code == 0, result.err
    job_id = result.json()["job_id"]
    assert proxy.cut_stream_bytes, "the proxy never cut the stream"
    delivered = [int(n) for n in re.findall(rb"id: (\d+)\nevent: [^\n]+\ndata: [^\n]*\n\n", proxy.cut_stream_bytes)]
    assert len(streams) >= 2
    assert streams[0].headers["last-event-id"] == "0"
    assert streams[1].headers["last-event-id"] == str(max(delivered))  # resumed after the last whole event

    with client_for(cli.server, tokens["team-a"]) as client:
        iterations = client.get(f"/v1/jobs/{job_id}/iterations", params={"limit": 1000}).json()["items"]
    assert len(iterations) > 3
    assert result.iteration_numbers() == [it["number"] for it in iterations] == list(range(1, len(iterations) + 1))
    assert _ops(cli.folder / "out" / "min-bad.onnx") == ["Mul"]


def test_an_upload_whose_answer_is_lost_is_retried_and_creates_one_job(cli: Cli) -> None:
    cli.write("model.onnx", build_example_model().SerializeToString())
    cli.write("spec.yaml", OP_PRESENT_MUL)
    with breaking_proxy(cli.server, drop_first_upload_answer=True) as proxy:
        result = Cli(cli.folder, proxy.url, cli.token).run(
            "submit", "model.onnx", "--check-spec", "spec.yaml", "--json"
        )
        uploads = proxy.requests_to("POST", "/v1/jobs")

    assert result.code == 0, result.err
    assert proxy.uploads_dropped == 1
    assert len(uploads) == 2
    assert uploads[0].headers["idempotency-key"] == uploads[1].headers["idempotency-key"]
    assert result.json()["replayed"] is True
    assert [job["id"] for job in _jobs(cli)] == [result.json()["job_id"]]


@pytest.fixture
def command_api_url(service_env: dict[str, str], processes: Processes) -> str:
    """The api (and the workers started after it) with command checks enabled."""
    service_env["ALLOW_COMMAND_CHECKS"] = "true"
    port = free_port()
    processes.start(["onnx-reducer", "serve", "--no-local-worker", "--host", "127.0.0.1", "--port", str(port)], "api")
    wait_http(f"http://127.0.0.1:{port}/healthz")
    return f"http://127.0.0.1:{port}"


def test_a_job_failed_by_its_check_infrastructure_exits_5_and_resumes_after_retry(
    command_api_url: str, processes: Processes, tokens: dict[str, str], tmp_path: Path
) -> None:
    processes.worker()
    cli = Cli(tmp_path, command_api_url, tokens["team-a"])
    check = BrokenInfraCheck.make(tmp_path / "check-state")
    cli.write("model.onnx", build_example_model().SerializeToString())
    cli.write("spec.yaml", check.spec)
    failed = cli.run("submit", "model.onnx", "--check-spec", "spec.yaml", "--mode", "linear", "--wait", "--json")
    assert failed.code == 5, failed.err
    job_id = failed.json()["job_id"]
    assert failed.json()["error"]["code"] == "check-infra-error"

    check.fix()  # the operator fixes the check's infrastructure
    assert cli.run("retry", job_id).code == 0
    resumed = cli.run("status", job_id, "--wait", "-o", "out", "--json")
    assert resumed.code == 0, resumed.err
    assert resumed.json()["status"] == "succeeded"
    assert _ops(tmp_path / "out" / "min-bad.onnx") == ["Mul"]

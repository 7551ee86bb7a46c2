"""The farm's view (issue 10) against real PostgreSQL, Redis and Celery workers: ``GET /v1/workers``
(team-neutral), farm metrics, stale workers going offline then dropped, and capability routing (a
job requiring a GPU no worker has says so, is not run by the worker that received it, and is
taken by a capable worker once one starts)."""

from __future__ import annotations

import importlib.metadata
import json
import sys
import time
import uuid
from typing import Any

from tests.service.commands import GPU_WORKER_COMMAND
from tests.service.conftest import Processes, client_for, scrape, start_api
from tests.service.helpers import OP_PRESENT_MUL, chain_model, eventually, submit, wait_job

MODEL = chain_model(6, 3).SerializeToString()


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in Prometheus text format, None when absent."""
    pairs = sorted(labels.items())  # the exposition writes labels sorted by name
    wanted = name + ("{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}" if labels else "")
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        if sample == wanted:
            return float(value)
    return None


def test_workers_are_listed_team_neutrally_with_farm_metrics_and_go_offline_when_silent(
    processes: Processes, tokens: dict[str, str]
) -> None:
    processes.env.update(ALLOW_COMMAND_CHECKS="true", WORKER_OFFLINE_AFTER_S="3", WORKER_FORGET_AFTER_S="8")
    command_api_url = start_api(processes)
    worker = processes.worker()
    marker = f"busy-{uuid.uuid4().hex}"
    sleeping = json.dumps(
        {"kind": "command", "command": [sys.executable, "-c", "import time; time.sleep(300)", marker]}
    )
    with client_for(command_api_url, tokens["team-a"]) as a, client_for(command_api_url, tokens["team-b"]) as b:
        idle = eventually(lambda: a.get("/v1/workers").json()["items"], 30, "the worker reports itself")
        assert [w["state"] for w in idle] == ["idle"]
        busy_job = submit(a, MODEL, sleeping).json()["id"]

        def running_check() -> dict[str, Any] | None:
            items = a.get("/v1/workers").json()["items"]
            job = items[0]["job"] if items else None
            return items[0] if job and job["check"] else None

        seen_by_a = eventually(running_check, 60, "team a sees its job's check on the worker")
        assert seen_by_a["state"] == "busy" and seen_by_a["queues"] == ["cpu"]
        assert seen_by_a["job"]["id"] == busy_job
        assert seen_by_a["job"]["check"]["iteration"] == 1 and seen_by_a["job"]["check"]["phase"] == "original"
        assert seen_by_a["gpus"] == []
        assert seen_by_a["runtimes"]["onnxruntime"] == importlib.metadata.version("onnxruntime")
        assert "CPUExecutionProvider" in seen_by_a["runtimes"]["providers"]
        listing_b = b.get("/v1/workers")
        assert listing_b.json()["items"][0]["state"] == "busy" and listing_b.json()["items"][0]["job"] is None
        assert busy_job not in listing_b.text
        assert listing_b.json()["busy"] == 1 and listing_b.json()["online"] == 1

        waiting_job = submit(b, MODEL, OP_PRESENT_MUL).json()["id"]
        assert (
            b.get(f"/v1/jobs/{waiting_job}").json()["waiting_reason"]
            == "waiting for a free worker (1 can run it, all busy)"
        )
        text = scrape(command_api_url)
        name = seen_by_a["name"]
        assert metric(text, "onnx_reducer_queue_depth", team="team-b", queue="cpu") == 1
        assert metric(text, "onnx_reducer_worker_busy", worker=name) == 1
        assert metric(text, "onnx_reducer_workers", state="busy") == 1

        a.post(f"/v1/jobs/{busy_job}/cancel")
        done = wait_job(b, waiting_job)
        assert done["status"] == "succeeded" and done["waiting_reason"] is None
        text = scrape(command_api_url)
        assert (
            metric(text, "onnx_reducer_checks_total", team="team-b") == done["progress"]["checks_run"]
        )  # the cancelled one ended unjudged
        assert (metric(text, "onnx_reducer_checks_per_second", team="team-b") or 0) > 0
        assert metric(text, "onnx_reducer_queue_depth", team="team-b", queue="cpu") is None
        assert (metric(text, "onnx_reducer_worker_busy_seconds_total", worker=name) or 0) > 0
        assert 0 < (metric(text, "onnx_reducer_worker_utilisation", worker=name) or 0) <= 1
        assert metric(text, "onnx_reducer_verdict_cache_hit_ratio") is not None

        worker.kill()
        eventually(lambda: a.get("/v1/workers").json()["items"][0]["state"] == "offline", 15, "offline")
        eventually(lambda: a.get("/v1/workers").json()["items"] == [], 20, "dropped from the list")


def test_a_job_requiring_a_gpu_no_worker_has_says_so_until_a_capable_worker_takes_it(
    api_url: str, processes: Processes, tokens: dict[str, str]
) -> None:
    plain = processes.worker(GPU_WORKER_COMMAND)
    spec = OP_PRESENT_MUL + "requires: {gpu: H100}\n"
    with client_for(api_url, tokens["team-a"]) as client:
        job_id = submit(client, MODEL, spec).json()["id"]
        plain.wait_for(f"job {job_id} needs GPU H100, which this worker", timeout=30)
        job = client.get(f"/v1/jobs/{job_id}").json()
        assert job["queue"] == "gpu" and job["status"] == "queued" and job["attempts"] == 0
        assert job["waiting_reason"] == "no worker offers GPU H100 (1 worker online: cpu x1)"
        time.sleep(4)  # the worker that cannot serve it does not take it back (it is not idle-pulled)
        assert client.get(f"/v1/jobs/{job_id}").json()["attempts"] == 0

        capable = processes.worker(GPU_WORKER_COMMAND, WORKER_GPUS="NVIDIA H100 80GB HBM3")
        job = wait_job(client, job_id, timeout=90)
        workers = {w["name"]: w for w in client.get("/v1/workers").json()["items"]}
    assert job["status"] == "succeeded", job
    assert job["waiting_reason"] is None
    assert sorted(w["gpus"][0] if w["gpus"] else "cpu" for w in workers.values()) == ["NVIDIA H100 80GB HBM3", "cpu"]
    assert f"job {job_id} started" in capable.output()
    assert f"job {job_id} started" not in plain.output()

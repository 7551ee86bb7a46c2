"""A cancel or a delete reaches the preparation of a 450k-node model (issue 30, done when: "Cancel
during preparation of a 450k-node model: the worker is free again within 5 s, no folder left").
The model is built in code in a few seconds: a chain of 450,000 tiny unary nodes with the Mul the
check looks for in its middle. The only Celery worker (solo pool) claims it and prepares it; the
job is cancelled (or deleted) while it prepares, a small job is submitted, and the test waits (an
event, generous timeout) for the worker to take that next job; how long that took is recorded as
the ``freed_s`` property (the report's number), and nothing of the stopped job's folder is left."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from examples.build_example_model import build_example_model
from tests.service.conftest import Processes, client_for, start_api
from tests.service.helpers import submit, wait_job
from tests.service.stopping import stop_then_take_next, wait_status

NODES = 450_000
GENEROUS_S = 120.0  # a wait, not a measure: the measured time is recorded and reported


def huge_chain_model(length: int = NODES) -> bytes:
    """x -> Relu/Neg/Abs ... -> Mul(t, t) in the middle -> ... -> y, serialized (about 2 s)."""
    ops = ("Relu", "Neg", "Abs")
    graph = onnx.GraphProto(name="huge-chain")
    current, middle = "x", length // 2
    for i in range(length):
        out = f"t{i}" if i < length - 1 else "y"
        node = graph.node.add()
        node.op_type = "Mul" if i == middle else ops[i % len(ops)]
        node.name = f"n{i}"
        node.input.extend([current, current] if i == middle else [current])
        node.output.append(out)
        current = out
    graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]))
    graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data: bytes = model.SerializeToString()
    return data


@pytest.mark.slow
@pytest.mark.parametrize("how", ["cancel", "delete"])
def test_a_stopped_450k_node_preparation_frees_the_worker_and_leaves_no_folder(
    processes: Processes,
    tokens: dict[str, str],
    data_dir: Path,
    how: str,
    record_property: Callable[[str, object], None],
) -> None:
    big = huge_chain_model()
    processes.worker()
    url = start_api(processes)
    small = build_example_model().SerializeToString()
    with client_for(url, tokens["team-a"]) as client:
        response = submit(client, big)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        wait_status(client, job_id, {"running"}, timeout=GENEROUS_S)  # claimed: its preparation has begun
        assert not client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]  # still preparing

        next_id, freed = stop_then_take_next(
            client, job_id, how, small, cancel_timeout=GENEROUS_S, take_timeout=GENEROUS_S
        )
        record_property("freed_s", f"{freed:.2f}")
        print(f"\n450k-node preparation, {how}: the worker took its next job {freed:.2f} s after it")
        work = data_dir / "jobs" / job_id / "work"
        left = sorted(p.name for p in work.iterdir()) if work.is_dir() else []
        job_folder_exists = (data_dir / "jobs" / job_id).exists()
        assert wait_job(client, next_id)["status"] == "succeeded"
    assert left == [], f"left in the stopped job's work folder: {left}"
    if how == "delete":
        assert not job_folder_exists, "the deleted job's folder was made again"

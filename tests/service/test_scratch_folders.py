"""A worker's temporary files live under DATA_DIR (issue 30, R11): ``scratch/<host>/<pid>-<start>``,
never the system temp folder, where a killed worker's check folder used to stay for good. A
folder whose process is gone is swept when a worker starts (and on every heartbeat)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.service.conftest import Processes, client_for, start_api
from tests.service.helpers import eventually, submit


def _slow_model(trips: int = 60_000_000) -> bytes:
    """A Loop of ``trips`` additions: onnxruntime runs it for tens of seconds."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1]),
        ],
        [numpy_helper.from_array(np.array([1.0], np.float32), "one")],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "cond", "x"], ["y"], body=body, name="loop")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.array(trips, np.int64), "trips"), numpy_helper.from_array(np.array(True), "cond")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_workers_check_folder_is_under_data_dir_and_swept_at_the_next_start(
    processes: Processes, tokens: dict[str, str], data_dir: Path
) -> None:
    host = data_dir / "scratch" / socket.gethostname()
    stale = host / f"{_dead_pid()}-12345"  # a process that is gone left its folder
    (stale / "onnx-reducer-check-x").mkdir(parents=True)
    (stale / "onnx-reducer-check-x" / "payload.json").write_text("{}")

    worker = processes.worker()
    assert not stale.exists(), "a dead process's scratch folder survived a worker's start"
    mine = list(host.glob(f"{worker.popen.pid}-*"))
    assert len(mine) == 1, sorted(p.name for p in host.iterdir())

    url = start_api(processes)
    with client_for(url, tokens["team-a"]) as client:
        response = submit(client, _slow_model(), "kind: error\n")
        assert response.status_code == 202, response.text
    check_dirs = eventually(lambda: list(mine[0].glob("onnx-reducer-check-*")), 120, "no check folder in the scratch")
    worker.kill()  # SIGKILL while the check runs: nothing removes its folder
    assert all(path.exists() for path in check_dirs)

    processes.worker()
    assert not mine[0].exists(), "the killed worker's scratch folder survived the next worker's start"

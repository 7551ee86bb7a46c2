"""Helpers of the service tests: models, bundles, job rows, an SSE reader and subprocess management."""

from __future__ import annotations

import io
import itertools
import json
import os
import signal
import socket
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy.orm import Session

import checks.spec
from checks.spec import parse_check_spec
from persistence.enums import JobStatus
from persistence.models import Job
from persistence.repositories import JobRepository

OP_PRESENT_MUL = "kind: op-present\nops: [Mul]\n"
OP_PRESENT_SOFTMAX = "kind: op-present\nops: [Softmax]"


def chain_model(length: int = 24, mul_at: int = 15) -> onnx.ModelProto:
    """x -> unary ops ... -> Mul(t, t) at ``mul_at`` -> ... -> y: many iterations to reduce."""
    ops = ["Relu", "Neg", "Abs", "Sigmoid", "Tanh", "Exp", "Floor", "Ceil"]
    nodes, current = [], "x"
    for i in range(length):
        out = f"t{i}" if i < length - 1 else "y"
        if i == mul_at:
            nodes.append(helper.make_node("Mul", [current, current], [out], name=f"n{i}_Mul"))
        else:
            op = ops[i % len(ops)]
            nodes.append(helper.make_node(op, [current], [out], name=f"n{i}_{op}"))
        current = out
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@dataclass(frozen=True)
class BrokenInfraCheck:
    """A command check that cannot start is an infrastructure error (no verdict about the model).
    After its first run, while ``state/BROKEN`` exists, the check script takes away its own execute
    permission, so every later check fails to start until ``fix()`` (the operator) restores it.
    Otherwise 'Mul' in the model is the failure."""

    state: Path
    SCRIPT = """#!/bin/sh
if [ -e {state}/BROKEN ]; then chmod -x "$0"; fi
if grep -q Mul "$1"; then exit 1; fi
"""

    @classmethod
    def make(cls, state: Path) -> BrokenInfraCheck:
        state.mkdir()
        (state / "BROKEN").touch()
        script = state / "check.sh"
        script.write_text(cls.SCRIPT.format(state=state))
        script.chmod(0o755)
        return cls(state)

    @property
    def spec(self) -> str:
        return f"kind: command\ncommand: ['{self.state}/check.sh', '{{model}}']\n"

    def fix(self) -> None:
        (self.state / "BROKEN").unlink()
        (self.state / "check.sh").chmod(0o755)


def stored_job(
    session: Session,
    team_id: str,
    status: JobStatus = JobStatus.QUEUED,
    model_sha256: str = "0" * 64,
    model_size: int = 1,
) -> Job:
    """A job row of team ``team_id``, an op-present check of a model that is nowhere on disk, added
    to ``session`` and flushed (its id is set)."""
    job = Job(
        team_id=team_id,
        status=status,
        queue="cpu",
        mode="auto",
        check_spec=OP_PRESENT_MUL,
        spec=parse_check_spec(OP_PRESENT_MUL).to_json(),  # as intake stores it
        check_kind="op-present",
        model_filename="model.onnx",
        model_sha256=model_sha256,
        model_size=model_size,
        model_path="models/x/model.onnx",
    )
    return JobRepository(session).add(job)


def model_with_weights_next_to_it(
    folder: Path, shape: tuple[int, int] = (16, 16), values: tuple[float, float] = (1, 2)
) -> Path:
    """x -> Add(w1) -> Mul(w2) -> Relu -> y, its weights (``values``) in weights.bin beside
    ``folder/model.onnx``."""
    weights = [
        numpy_helper.from_array(np.full(shape, v, np.float32), name)
        for v, name in zip(values, ("w1", "w2"), strict=True)
    ]
    nodes = [
        helper.make_node("Add", ["x", "w1"], ["a"], name="add"),
        helper.make_node("Mul", ["a", "w2"], ["m"], name="mul"),
        helper.make_node("Relu", ["m"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    return path


def tar_bundle(files: dict[str, bytes], links: dict[str, tuple[str, bytes]] | None = None) -> bytes:
    """A tar of ``files``; ``links`` maps a member name to (target, kind SYMTYPE/LNKTYPE)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name, (target, kind) in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            archive.addfile(info)
    return buffer.getvalue()


T = TypeVar("T")

_ports = itertools.count()


def free_port() -> int:
    """A free port on 127.0.0.1. Under pytest-xdist each worker takes its ports in turn from its own
    range below the kernel's ephemeral ports (32768 up), so neither another worker nor an outgoing
    connection can take one before the test's server binds it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw"):
        base = 20000 + int(worker[2:]) % 8 * 1500
        for _ in range(1500):
            port = base + next(_ports) % 1500
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Proc:
    """A started subprocess whose output goes to a log file (read it when a test fails)."""

    popen: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return
            if self.popen.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"'{text}' did not appear; output:\n{self.output()[-4000:]}")

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def start(command: list[str], env: dict[str, str], cwd: Path, log: Path) -> Proc:
    sink = open(log, "ab")  # noqa: SIM115 - owned by the child
    popen = subprocess.Popen(command, env=env, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    sink.close()
    return Proc(popen, log)


def wait_http(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout}s")


@dataclass
class SseEvent:
    id: int
    kind: str
    data: dict[str, Any]


def read_sse(
    client: httpx.Client,
    url: str,
    last_event_id: int | None = None,
    stop: Callable[[SseEvent], bool] | None = None,
    timeout: float = 180.0,
) -> Iterator[SseEvent]:
    """Yield the events of one SSE connection until it ends (or ``stop`` says so)."""
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    with client.stream("GET", url, headers=headers, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line == "":
                if "data" in fields:
                    event = SseEvent(int(fields["id"]), fields["event"], json.loads(fields["data"]))
                    yield event
                    if stop is not None and stop(event):
                        return
                fields = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(":")
                fields[key] = value.removeprefix(" ")


def wait_job(client: httpx.Client, job_id: str, timeout: float = 180.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def submit(
    client: httpx.Client, model: bytes, spec: str = OP_PRESENT_MUL, filename: str = "model.onnx", **fields: str
) -> httpx.Response:
    return client.post("/v1/jobs", files={"model": (filename, model)}, data={"check_spec": spec, **fields})


def run_captured(
    command: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to its end (at most ``timeout`` s), its output captured as text; the caller
    reads the exit code."""
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def eventually(condition: Callable[[], T], timeout: float, what: str) -> T:
    """``condition()``'s first true value, asked every 0.1 s for at most ``timeout`` s (a bound for
    a loaded machine, not a measure)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def count_spec_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The check spec texts parsed in this process from now on (``checks.spec._load_document``
    spied on; the requirements' cache cleared, so a spec read before is parsed again if read)."""
    texts: list[str] = []
    load = checks.spec._load_document

    def counted(text: str) -> Any:
        texts.append(text)
        return load(text)

    monkeypatch.setattr(checks.spec, "_load_document", counted)
    checks.spec.requirements_of.cache_clear()
    return texts

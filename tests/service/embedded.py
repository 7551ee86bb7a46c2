"""The embedded server (``onnx-reducer serve``: SQLite, a data folder, the in-process worker
slots) started for a test the way ``make run`` starts it, with a token made by the command its
start-up hint names."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.service.commands import EMBEDDED_COMMAND
from tests.service.conftest import BIN
from tests.service.helpers import Proc, free_port, start, wait_http


@dataclass(frozen=True)
class EmbeddedServer:
    url: str
    token: str
    proc: Proc
    env: dict[str, str]
    home: Path  # its ONNX_REDUCER_HOME: the database, the jobs' folders


def embedded_env(folder: Path, settings: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without the farm's settings, the venv's commands first, the data in
    ``folder/data`` (what ``make run`` does: the default is the user's data folder)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DATA_DIR")}
    env |= {"PATH": BIN + os.pathsep + env.get("PATH", ""), "ONNX_REDUCER_HOME": str(folder / "data")}
    return env | (settings or {})


@contextmanager
def embedded_server(folder: Path, settings: dict[str, str] | None = None) -> Iterator[EmbeddedServer]:
    """A running embedded server (stopped at the end; a test may kill it first) and a token."""
    env = embedded_env(folder, settings)
    port = free_port()
    proc = start([*EMBEDDED_COMMAND, "--port", str(port)], env, folder, folder / "serve.log")
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/healthz")
        proc.wait_for("token create --team default", timeout=60)
        command = ["onnx-reducer", "token", "create", "--team", "default"]
        made = subprocess.run(command, cwd=folder, env=env, check=True, capture_output=True, text=True)
        yield EmbeddedServer(url, made.stdout.strip(), proc, env, folder / "data")
    finally:
        proc.stop()


def wait_for_child(pid: int, marker: str, timeout: float) -> int | None:
    """The child of ``pid`` whose command line holds ``marker``, once it appears within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = []  # each thread's children are listed under that thread
        for task in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                children += task.read_text().split()
            except OSError:
                continue
        for child in children:
            try:
                if marker in Path(f"/proc/{child}/cmdline").read_text():
                    return int(child)
            except OSError:
                continue
        time.sleep(0.02)
    return None

"""A SIGKILLed api leaves no intake process behind: its spawn workers (and so multiprocessing's
resource tracker) exit with it (``checks.lifeline.exit_with_parent_process``)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from examples.build_example_model import build_example_model
from tests.service.commands import api_command
from tests.service.conftest import Processes, client_for
from tests.service.helpers import free_port, submit, wait_http


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            tree.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    return tree


def _descendants(pid: int) -> set[int]:
    tree, found, todo = _children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (a reparented child is reaped by whoever adopted it)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_a_sigkilled_api_takes_its_intake_pool_along(processes: Processes, tokens: dict[str, str]) -> None:
    port = free_port()
    api = processes.start(api_command(port), "api")
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz")
    with client_for(url, tokens["team-a"]) as client:  # two uploads at once: both intake workers start
        for _ in range(2):
            assert submit(client, build_example_model().SerializeToString()).status_code == 202
    pool = _descendants(api.popen.pid)
    commands = {pid: _cmdline(pid) for pid in pool}
    assert any("multiprocessing" in c and "spawn_main" in c for c in commands.values()), commands
    assert any("resource_tracker" in c for c in commands.values()), commands

    os.kill(api.popen.pid, signal.SIGKILL)  # the api alone, not its process group
    api.popen.wait()
    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in pool) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: commands[pid] for pid in pool if _running(pid)}
    for pid in left:  # never leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert left == {}, f"still running after the api was killed: {left}"

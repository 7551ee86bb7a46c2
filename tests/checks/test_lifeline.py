"""A check dies with the process that started it (``checks.lifeline``): PR_SET_PDEATHSIG on the
child, and the owner mark that lets a later worker kill what a dead worker's checks left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from checks.lifeline import OWNER_ENV, die_with_parent, kill_orphaned_checks, owner_mark
from tests.checks.processes import running, wait_gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (/proc, prctl)")

# A parent that starts a sleeping child the way checks are started, prints its pid once the child
# is set up, then waits. "command": a program, given PR_SET_PDEATHSIG by preexec_fn; "python": our
# own Python child, which sets it itself first thing.
PARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    from checks.lifeline import die_with_parent
    SLEEP = "import time; time.sleep(120)"
    OWN = "from checks.lifeline import die_with_parent_now; die_with_parent_now(); print(1, flush=True); " + SLEEP
    if sys.argv[2] == "command":
        child = subprocess.Popen([sys.executable, "-c", SLEEP, sys.argv[1]], start_new_session=True,
                                 preexec_fn=die_with_parent())
    else:
        child = subprocess.Popen([sys.executable, "-c", OWN, sys.argv[1]], start_new_session=True,
                                 stdout=subprocess.PIPE)
        child.stdout.readline()
    print(child.pid, flush=True)
    time.sleep(120)
    """
)


@pytest.mark.parametrize("kind", ["command", "python"])
def test_a_check_child_is_killed_when_its_parent_is_killed(kind: str) -> None:
    root = str(Path(__file__).resolve().parents[2])
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, f"lifeline-{uuid.uuid4().hex}", kind],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": root, OWNER_ENV: "worker-under-test"},  # as under a worker
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert running(child)
    parent.kill()
    parent.wait()
    parent.stdout.close()
    assert wait_gone([child], within_s=60.0), "the check child outlived its parent"  # it sleeps 120 s


def test_processes_marked_by_a_dead_owner_are_killed_and_others_spared() -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    owner = subprocess.Popen(sleeper)  # an owner that will die
    dead_mark = owner_mark(owner.pid)
    assert dead_mark is not None
    live_mark = owner_mark(os.getpid())
    orphan = subprocess.Popen(sleeper, env={**os.environ, OWNER_ENV: str(dead_mark)}, start_new_session=True)
    kept = subprocess.Popen(sleeper, env={**os.environ, OWNER_ENV: str(live_mark)}, start_new_session=True)
    plain_env = {k: v for k, v in os.environ.items() if k != OWNER_ENV}
    unmarked = subprocess.Popen(sleeper, env=plain_env, start_new_session=True)
    try:
        kill_orphaned_checks()
        assert orphan.poll() is None  # its owner still runs
        owner.kill()
        owner.wait()
        kill_orphaned_checks()  # (a service worker of a test running beside this one may be first)
        orphan.wait(5)
        assert orphan.returncode == -signal.SIGKILL
        assert kept.poll() is None and unmarked.poll() is None
    finally:
        for proc in (owner, orphan, kept, unmarked):
            proc.kill()
            proc.wait()


def test_outside_a_worker_command_checks_keep_the_cheap_spawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the command line no preexec_fn (a real fork of a parent that may hold a large model);
    under a worker's owner mark, the lifeline."""
    monkeypatch.delenv(OWNER_ENV, raising=False)
    assert die_with_parent() is None
    monkeypatch.setenv(OWNER_ENV, "1:1")
    assert die_with_parent() is not None

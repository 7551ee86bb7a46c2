"""Warm check runners: spec checks without the interpreter's start-up.

A cold spec check starts ``python -m checks.child``, which imports numpy, onnx and onnxruntime
(0.3-0.5 s) before it reads the model. A *warm runner* is a server process
(``checks.warm_server``) that did those imports once and forks one child per check; the child is
what the cold process would have been: its own session and process group, its own private
folder, the same allow-listed environment, and it ends with its check. The caller watches it
exactly as it watches a cold child (``checks.capture.pump``): the check's time limit and kill, its
memory limit (the forked child's resident memory and every process it starts), a stop scope's
kill, its output through a pipe of the caller's. So a check that segfaults, hangs or exceeds its
memory is never followed by another check in the same process, and the runner goes on.

Runners are kept per environment (a slot's ``CUDA_VISIBLE_DEVICES`` is part of it) in a pool of
this process: a thread takes an idle runner, or starts one, and gives it back after the check, so
``--jobs N`` (N checks at once) keeps N warm runners, one per slot. The server never creates an
``InferenceSession`` or a CUDA context (see ``checks.warm_server`` for the one native thread the
onnxruntime import starts); a runner the caller stopped using in the middle of a check
(cancelled, an error) is closed, never reused, and one that died while idle is replaced.

``ONNX_REDUCER_WARM_CHECKS=0`` runs every spec check cold; a runner that cannot start makes the
check run cold (and that environment is not tried again in this process)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from checks.capture import Stopped, StreamCapture, kill_group, pump
from checks.command import KILL_GRACE_S
from checks.lifeline import owner_mark

WARM_ENV = "ONNX_REDUCER_WARM_CHECKS"
START_TIMEOUT_S = 120.0  # imports on a loaded machine; a runner that takes longer is given up
REPLY_TIMEOUT_S = 30.0  # the fork of a warm child, or its exit status after it was killed
_MAX_MESSAGE_BYTES = 64 * 1024


class WarmRunnerError(Exception):
    """The runner itself failed (it could not start, or it went away): the check runs cold."""


def enabled() -> bool:
    return os.environ.get(WARM_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True)
class ChildRun:
    """What a check's child process did: why it was stopped (None: it ended), its exit code and
    its captured output."""

    stopped: Stopped | None
    returncode: int
    output: str


class ForkedCheck:
    """A check forked by a runner, as ``pump`` sees it: its pid, and ``wait`` for its exit status
    (the runner sends it; the child stays unreaped until the caller says ``reap``)."""

    def __init__(self, pid: int, runner: WarmRunner) -> None:
        self.pid = pid
        self.runner = runner
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = int(self.runner.receive(timeout)["exit"])
        return self.returncode


class WarmRunner:
    """One server process with the runtimes imported (``checks.warm_server``), in ``env``."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "checks.warm_server", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal reaches the caller, not the runner
                cwd=tempfile.gettempdir(),
                env=self.env,
            )
        except OSError as exc:
            ours.close()
            raise WarmRunnerError(f"cannot start a warm check runner: {exc}") from exc
        finally:
            theirs.close()
        self.usable = True
        try:
            self.reply(START_TIMEOUT_S)  # {"ready": pid} once the imports are done
        except WarmRunnerError as exc:
            self.close()
            raise WarmRunnerError(f"the warm check runner did not start: {exc}") from exc

    def receive(self, timeout: float | None) -> dict[str, Any]:
        """The runner's next message; ``subprocess.TimeoutExpired`` when none came in ``timeout``
        (``ForkedCheck.wait`` is ``Popen.wait`` to ``pump``), ``WarmRunnerError`` when it is gone."""
        poller = select.poll()  # not select.select: a service process may hold fds above 1024
        poller.register(self.sock, select.POLLIN)
        if not poller.poll(None if timeout is None else max(0, int(timeout * 1000))):
            raise subprocess.TimeoutExpired("warm check runner", timeout or 0.0)
        try:
            data = self.sock.recv(_MAX_MESSAGE_BYTES)
            message: dict[str, Any] = json.loads(data) if data else {}
        except (OSError, ValueError) as exc:
            raise WarmRunnerError(f"the warm check runner failed: {exc}") from exc
        if not message:
            self.usable = False
            raise WarmRunnerError("the warm check runner exited")
        if "error" in message:
            raise WarmRunnerError(str(message["error"]))
        return message

    def reply(self, timeout: float) -> dict[str, Any]:
        """``receive`` where no answer in ``timeout`` means the runner is stuck."""
        try:
            return self.receive(timeout)
        except subprocess.TimeoutExpired as exc:
            raise WarmRunnerError(f"the warm check runner did not answer in {timeout:g} s") from exc

    def run(self, payload_path: Path, folder: Path, timeout_s: float, memory_limit_bytes: int | None) -> ChildRun:
        """Fork a child that runs ``checks.child PAYLOAD`` in ``folder``; watch it like a cold one.
        Raises ``WarmRunnerError`` when the runner failed before the check could start."""
        read_fd, write_fd = os.pipe()
        try:
            request = json.dumps({"payload": str(payload_path), "cwd": str(folder)}).encode()
            socket.send_fds(self.sock, [request], [write_fd])
        except OSError as exc:
            os.close(read_fd)
            self.usable = False
            raise WarmRunnerError(f"the warm check runner is gone: {exc}") from exc
        finally:
            os.close(write_fd)
        with open(read_fd, "rb", buffering=0) as stream:
            try:
                check = ForkedCheck(int(self.reply(REPLY_TIMEOUT_S)["pid"]), self)
                return self._watch(check, stream, timeout_s, memory_limit_bytes)
            except BaseException:
                self.usable = False  # mid-check: the protocol is out of step, the runner goes
                raise

    def _watch(
        self, check: ForkedCheck, stream: IO[bytes], timeout_s: float, memory_limit_bytes: int | None
    ) -> ChildRun:
        output = StreamCapture()
        stopped = pump(check, [(stream, output)], timeout_s, memory_limit_bytes)
        kill_group(check)  # on timeout, or grandchildren left behind by the runtime
        if stopped is not None:
            pump(check, [(stream, output)], KILL_GRACE_S)
        if check.returncode is None:  # killed above: its exit status comes at once
            check.returncode = int(self.reply(REPLY_TIMEOUT_S)["exit"])
        try:
            self.sock.send(b"reap")
        except OSError:  # the runner died after the check ended: the verdict stands, the runner goes
            self.usable = False
        code = check.returncode
        return ChildRun(stopped, code, output.text())

    def close(self) -> None:
        self.usable = False
        with contextlib.suppress(OSError):
            self.sock.close()  # the server sees the end of the socket: it kills its check and exits
        try:
            self.proc.wait(REPLY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class RunnerPool:
    """Idle runners of this process by environment; one runner serves one check at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[tuple[str, str], ...], list[WarmRunner]] = {}
        self._broken: set[tuple[tuple[str, str], ...]] = set()

    @staticmethod
    def _key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(env.items()))

    def take(self, env: Mapping[str, str]) -> WarmRunner | None:
        """An idle runner for ``env`` that still runs, or a new one; None where runners cannot
        start here."""
        key = self._key(env)
        with self._lock:
            if key in self._broken:
                return None
            runner, dead = self._idle_alive(key)
        for gone in dead:  # died while idle (killed, out of memory): replaced by a fresh one
            gone.close()
        if runner is not None:
            return runner
        try:
            return WarmRunner(env)
        except WarmRunnerError:
            with self._lock:
                self._broken.add(key)
            return None

    def _idle_alive(self, key: tuple[tuple[str, str], ...]) -> tuple[WarmRunner | None, list[WarmRunner]]:
        """(an idle runner of ``key`` whose process runs, the dead ones found before it); under the lock."""
        idle = self._idle.get(key, [])
        dead: list[WarmRunner] = []
        while idle:
            runner = idle.pop()
            if runner.proc.poll() is None:
                return runner, dead
            dead.append(runner)
        return None, dead

    def give_back(self, runner: WarmRunner) -> None:
        if not runner.usable or runner.proc.poll() is not None:
            runner.close()
            return
        with self._lock:
            self._idle.setdefault(self._key(runner.env), []).append(runner)

    def close_all(self) -> None:
        with self._lock:
            runners = [r for idle in self._idle.values() for r in idle]
            self._idle.clear()
        for runner in runners:
            runner.close()

    def forget(self) -> None:
        """In a forked child of this process (a Celery pool process): the runners are the parent's."""
        self._idle = {}
        self._broken = set()
        self._lock = threading.Lock()

    @property
    def idle_count(self) -> int:
        with self._lock:
            return sum(len(idle) for idle in self._idle.values())


POOL = RunnerPool()
atexit.register(POOL.close_all)
os.register_at_fork(after_in_child=POOL.forget)


REUSE_PREFIX = "onnx-reducer-reuse-"


def remove_orphaned_reuse_folders(parent: Path) -> int:
    """Remove the reuse folders in ``parent`` whose process is gone (its name carries the
    process's owner mark, ``checks.lifeline.owner_mark``): a Celery pool process ends with
    ``os._exit`` and a killed one with nothing, so neither ran its ``atexit``. Returns how many."""
    removed = 0
    for folder in parent.glob(f"{REUSE_PREFIX}*_*-*"):
        pid, _, started = folder.name.removeprefix(REUSE_PREFIX).split("-", 1)[0].partition("_")
        if pid.isdigit() and owner_mark(int(pid)) != f"{pid}:{started}":
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


class ReuseFolder:
    """This process's folder for what checks may reuse (``checks.reference_cache``): made when
    first asked for (the folders of processes that are gone removed then), removed when the process
    that made it exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._path: Path | None = None
        self._owner = 0

    def path(self) -> Path:
        with self._lock:
            if self._path is None or self._owner != os.getpid():
                self._owner = os.getpid()
                mark = owner_mark(self._owner)
                remove_orphaned_reuse_folders(Path(tempfile.gettempdir()))
                tag = mark.replace(":", "_") + "-" if mark else ""
                self._path = Path(tempfile.mkdtemp(prefix=REUSE_PREFIX + tag))
            return self._path

    def remove(self) -> None:
        if self._path is not None and self._owner == os.getpid():
            shutil.rmtree(self._path, ignore_errors=True)
            self._path = None


REUSE = ReuseFolder()
atexit.register(REUSE.remove)


def reuse_folder() -> str | None:
    """Where this process's spec checks store and read reusable reference values; None (nothing
    reused) when warm runners are off."""
    return str(REUSE.path()) if enabled() else None


def run_warm(
    env: Mapping[str, str], payload_path: Path, folder: Path, timeout_s: float, memory_limit_bytes: int | None
) -> ChildRun | None:
    """Run the check of ``payload_path`` in a warm child; None when it must run cold (warm runners
    are off, cannot start here, or the runner failed before the check started)."""
    if not enabled():
        return None
    runner = POOL.take(env)
    if runner is None:
        return None
    try:
        return runner.run(payload_path, folder, timeout_s, memory_limit_bytes)
    except WarmRunnerError:
        return None
    finally:
        POOL.give_back(runner)

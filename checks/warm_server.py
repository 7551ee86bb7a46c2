"""The server side of a warm check runner (``checks.warm``): ``python -m checks.warm_server FD``.

It imports numpy, onnx, onnxruntime and the spec kinds once (import only: no ``InferenceSession``,
no Python thread, CUDA never initialised here), then forks one child per check it is asked
for on the socket ``FD`` (a ``SOCK_SEQPACKET`` pair with the caller). The child starts a session
of its own (its own process group, killed as a whole), takes the output pipe the caller sent as
its stdout and stderr, changes into the check's private folder and runs ``checks.child`` there: from
then on it is the process a cold ``python -m checks.child`` would be, minus the start-up. Nothing
the child does reaches this process, so a check that crashes, hangs or exceeds its memory is never
followed by another check in the same process.

Messages (JSON, one per packet): the caller sends ``{"payload", "cwd"}`` with the pipe's write end;
this process answers ``{"pid"}`` once the child leads its own session, then ``{"exit"}`` (the
``returncode`` convention: negative for a signal) once it ended, without reaping it, so its process
group cannot be reused while the caller kills what is left of it; the caller's ``reap`` ends the
check. When the caller goes away (its end of the socket closes), the running check is killed and
this process exits.

Not quite single-threaded: importing onnxruntime (1.32) starts one native thread of its own,
asleep on a timed wait that now and then starts a short-lived helper thread. A forked child has
no copy of it; the child builds its own sessions and ends with ``os._exit`` (no destructor waits
for that thread). Should a child ever block on a lock that thread held at the fork, it ends as a
hanging check does, killed at its timeout (a wrong ``timeout`` verdict, not a hang of this process);
``ONNX_REDUCER_WARM_CHECKS=0`` rules that out."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import select
import signal
import socket
import sys
import traceback
from typing import Any

import numpy as np
import onnx  # noqa: F401 - imported once here, so that no check pays for it
import onnxruntime  # noqa: F401 - import only: a session or a CUDA context here would not survive a fork

import checks.kinds  # noqa: F401 - the spec kinds and what they import
from checks import child

MAX_MESSAGE_BYTES = 64 * 1024


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def _exit_code(status: os.waitid_result) -> int:
    if status.si_code == os.CLD_EXITED:
        return status.si_status
    return -status.si_status  # killed or dumped: the signal, as subprocess reports it


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _run_child(request: dict[str, Any], out_fd: int, ready_fd: int, sock: socket.socket) -> None:
    """In the forked child: become the check's own session, then run ``checks.child``. Never returns."""
    code = 1
    try:
        sock.close()
        os.setsid()
        os.write(ready_fd, b"1")
        os.close(ready_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        os.chdir(request["cwd"])
        random.seed()  # as a fresh interpreter would be: not the state every fork shares
        np.random.seed()
        code = child.main([str(request["payload"])])
    except BaseException:  # noqa: BLE001 - whatever happens, this process must end here
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _fork_check(sock: socket.socket, request: dict[str, Any], out_fd: int) -> int:
    """The child's pid once it leads its own session (so the caller may kill its group at once)."""
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_read)
        _run_child(request, out_fd, ready_write, sock)
    os.close(ready_write)
    os.close(out_fd)
    os.read(ready_read, 1)  # empty when the child died before it got that far: its exit says why
    os.close(ready_read)
    return pid


def _wait_exit(sock: socket.socket, pid: int) -> int | None:
    """The child's exit code, leaving it unreaped; None when the caller went away meanwhile."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            readable, _, _ = select.select([sock.fileno(), pidfd], [], [])
            if pidfd in readable:
                status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                assert status is not None  # it has exited: pidfd is readable
                return _exit_code(status)
            if not sock.recv(MAX_MESSAGE_BYTES):
                return None
    finally:
        os.close(pidfd)


def serve_one(sock: socket.socket, request: dict[str, Any], out_fd: int) -> bool:
    """Run one check; False when the caller is gone (this process should exit)."""
    pid = _fork_check(sock, request, out_fd)
    send(sock, {"pid": pid})
    code = _wait_exit(sock, pid)
    if code is None:
        _kill(pid)
        return False
    send(sock, {"exit": code})
    answer = sock.recv(MAX_MESSAGE_BYTES)  # "reap": the caller has killed what was left of the check
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    return bool(answer)


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[0]))
    gc.freeze()  # the imported objects: a child's collections neither scan nor copy their pages
    send(sock, {"ready": os.getpid()})
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE_BYTES, 1)
        except OSError:
            return 0
        if not message:
            return 0  # the caller closed its end: it is gone or done with this runner
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            send(sock, {"error": "a check request needs exactly one output pipe"})
            continue
        if not serve_one(sock, json.loads(message), fds[0]):
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

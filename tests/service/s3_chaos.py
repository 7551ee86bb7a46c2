"""The S3 server a chaos test kills: moto's standalone server with its request recorder on, so what
it acknowledged survives a SIGKILL (moto keeps objects in memory only; the recorder appends each
request to a file on disk before moto handles it, and a restart on the same port replays that file:
a write-ahead log). What this proves and what not: single-request uploads (PUT, CopyObject) and
deletes come back exactly; multipart uploads do not (their upload ids are the server's own, new on
replay), so a chaos run keeps its blobs under the store's ``multipart_threshold``. A request the
server got but never answered is replayed too: as with a real server that committed before dying,
the client may see an error for an object that exists.

``ChaosGate`` is a TCP proxy in front of it that catches the next upload (a PUT of a ``sha256/``
key) or download (a GET of one) in flight: it lets the server see only part of the upload (or the
client only part of the download), signals, and once the test has killed the server cuts the
connection, the way a server killed mid-transfer does."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.service.helpers import free_port
from tests.service.s3_server import ACCESS_KEY, SECRET_KEY, S3Server
from tests.service.sockets import accepted_clients

MOTO_SERVER = str(Path(sys.executable).parent / "moto_server")


class RecordingS3:
    """moto_server on a fixed port, logging its requests to ``folder``; ``kill()`` SIGKILLs it,
    ``restart()`` starts it again on the same port and replays the log."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.recording = folder / "moto-recording.jsonl"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "MOTO_ENABLE_RECORDING": "true",
            "MOTO_RECORDER_FILEPATH": str(self.recording),
        }
        command = [MOTO_SERVER, "-H", "127.0.0.1", "-p", str(self.port)]
        log = self.folder / f"moto-{self.starts}.log"
        self.starts += 1
        with open(log, "wb") as sink:
            self.proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
        _wait_ready(self.endpoint, self.proc, log)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def restart(self) -> None:
        """Start again on the same port with what the killed server had acknowledged."""
        self.kill()
        self.start()
        replayed = httpx.post(self.endpoint + "/moto-api/recorder/replay-recording", timeout=120)
        assert replayed.status_code == 200, replayed.text

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _wait_ready(endpoint: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"moto_server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(endpoint + "/", timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    raise AssertionError(f"moto_server did not answer within {timeout} s: {log.read_text()[-2000:]}")


@dataclass
class Trap:
    """The next request whose head starts with ``head`` is caught: ``caught`` is set once part of
    it (an upload) or part of its answer (a download) went through; the connection is cut once
    ``released`` is set (after the test killed the server)."""

    head: bytes
    caught: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)


class ChaosGate:
    """A TCP proxy on its own port in front of ``target_port`` (the S3 server)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._trap: Trap | None = None
        self._lock = threading.Lock()
        self.accepting = threading.Event()  # cleared while the server restarts and replays its log
        self.accepting.set()
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, daemon=True).start()

    def server(self) -> S3Server:
        return S3Server(f"http://127.0.0.1:{self.port}")

    def arm(self, head: bytes) -> Trap:
        trap = Trap(head)
        with self._lock:
            self._trap = trap
        return trap

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            if self._trap is not None:
                self._trap.released.set()

    def _take(self, data: bytes) -> Trap | None:
        with self._lock:
            trap = self._trap
            if trap is not None and data.startswith(trap.head):
                self._trap = None
                return trap
        return None

    def _accept(self) -> None:
        for client in accepted_clients(self._listener):
            if not self.accepting.is_set():
                client.close()  # restarting: as refused as a server not yet listening
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()  # the server is down: as refused as it would be
                continue
            upstream.settimeout(None)
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        """Client to server; a trapped request goes through in part (an upload) or whole (a download)."""
        answers: list[Trap] = []
        threading.Thread(target=self._answers, args=(upstream, client, answers), daemon=True).start()
        try:
            while data := client.recv(65536):
                trap = self._take(data)
                if trap is None:
                    upstream.sendall(data)
                elif trap.head.startswith(b"PUT"):
                    upstream.sendall(data[: max(1, len(data) // 2)])  # the server has part of the upload
                    trap.caught.set()
                    trap.released.wait(120)
                    break
                else:
                    answers.append(trap)
                    upstream.sendall(data)
        except OSError:
            pass
        finally:
            _cut(client, upstream)

    def _answers(self, upstream: socket.socket, client: socket.socket, answers: list[Trap]) -> None:
        try:
            while data := upstream.recv(65536):
                if answers:  # the trapped download: part of its answer, then the server dies
                    trap = answers.pop()
                    client.sendall(data[: max(1, len(data) // 2)])
                    trap.caught.set()
                    trap.released.wait(120)
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            _cut(client, upstream)


def _cut(*sockets: socket.socket) -> None:
    """Hang up both sides (a shutdown first: a close alone, while the other direction's thread
    waits in recv, would leave the connection open and the client waiting for its read timeout)."""
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()

"""A TCP proxy in front of the api that breaks connections on purpose, the way a flaky network or
load balancer does: it can cut the first event stream in the middle of its first ``iteration``
event, and hang up instead of delivering the answer to the first upload. It records every request
head it forwards, so a test can see what the client sent when it tried again."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from tests.service.sockets import accepted_clients

_REQUEST_HEAD = re.compile(rb"(GET|POST|PUT|DELETE) (\S+) HTTP/1\.1\r\n(.*?)\r\n\r\n", re.DOTALL)
_EVENT_STREAM = b"text/event-stream"
_ITERATION_DATA = re.compile(rb"event: iteration\ndata: ")


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class _Connection:
    client: socket.socket
    upstream: socket.socket
    request_bytes: bytearray = field(default_factory=bytearray)
    heads_seen: int = 0
    drop_next_response: bool = False

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@dataclass
class BreakingProxy:
    upstream_port: int
    cut_first_event_stream: bool = False
    drop_first_upload_answer: bool = False
    requests: list[Request] = field(default_factory=list)
    cut_stream_bytes: bytes = b""  # what the cut event stream delivered before the cut
    uploads_dropped: int = 0
    port: int = 0

    def __post_init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._streams_cut = 0
        self._connections: list[_Connection] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests_to(self, method: str, path_part: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and path_part in r.path]

    def start(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self) -> None:
        self._listener.close()
        for conn in self._connections:
            conn.close()

    def _accept(self) -> None:
        for client in accepted_clients(self._listener):
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            conn = _Connection(client, upstream)
            self._connections.append(conn)
            threading.Thread(target=self._client_to_upstream, args=(conn,), daemon=True).start()
            threading.Thread(target=self._upstream_to_client, args=(conn,), daemon=True).start()

    def _client_to_upstream(self, conn: _Connection) -> None:
        try:
            while chunk := conn.client.recv(65536):
                self._record_heads(conn, chunk)
                conn.upstream.sendall(chunk)
        except OSError:
            pass
        conn.close()

    def _record_heads(self, conn: _Connection, chunk: bytes) -> None:
        conn.request_bytes += chunk
        heads = _REQUEST_HEAD.findall(bytes(conn.request_bytes))
        for method, path, raw_headers in heads[conn.heads_seen :]:
            headers = {}
            for line in raw_headers.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            request = Request(method.decode(), path.decode(), headers)
            with self._lock:
                self.requests.append(request)
                upload = request.method == "POST" and request.path == "/v1/jobs"
                if self.drop_first_upload_answer and upload and self.uploads_dropped == 0:
                    conn.drop_next_response = True
        conn.heads_seen = len(heads)

    def _upstream_to_client(self, conn: _Connection) -> None:
        streamed = bytearray()
        cutting = False
        try:
            while chunk := conn.upstream.recv(65536):
                if conn.drop_next_response:
                    with self._lock:
                        self.uploads_dropped += 1
                    break  # the job was created; the client never hears so
                if _EVENT_STREAM in chunk and self.cut_first_event_stream:
                    with self._lock:
                        cutting = self._streams_cut == 0
                        self._streams_cut += 1
                if cutting:
                    streamed += chunk
                    match = _ITERATION_DATA.search(streamed)
                    if match:
                        keep = len(streamed) - len(chunk)
                        partial = streamed[keep : match.end() + 5]  # the event's first data bytes only
                        conn.client.sendall(partial)
                        self.cut_stream_bytes = bytes(streamed[: match.end() + 5])
                        break
                conn.client.sendall(chunk)
        except OSError:
            pass
        conn.close()


@contextmanager
def breaking_proxy(upstream_url: str, **behaviour: bool) -> Iterator[BreakingProxy]:
    proxy = BreakingProxy(int(upstream_url.rsplit(":", 1)[1]), **behaviour)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()

"""An OTLP/HTTP collector stand-in: a local HTTP server taking ``POST /v1/traces`` (protobuf, as
the OTLP/HTTP exporter sends it) and keeping every span it receives, decoded with
opentelemetry-proto. Tests wait on it for the spans they expect (a condition, never a sleep)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str  # "" for a root span
    attributes: dict[str, Any]
    service: str
    error: bool


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _spans(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    found = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        service=str(resource.get("service.name", "")),
                        error=span.status.code == span.status.STATUS_CODE_ERROR,
                    )
                )
    return found


@dataclass
class OtlpReceiver:
    url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self.changed:
            self.spans.extend(_spans(request))
            self.changed.notify_all()

    def wait_for(
        self, done: Callable[[list[ReceivedSpan]], bool], what: str, timeout: float = 120
    ) -> list[ReceivedSpan]:
        with self.changed:
            if not self.changed.wait_for(lambda: done(list(self.spans)), timeout):
                names = [(s.name, s.attributes.get("job.id")) for s in self.spans]
                raise AssertionError(f"the collector did not receive {what}; it has {names}")
            return list(self.spans)


def _handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            receiver.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()

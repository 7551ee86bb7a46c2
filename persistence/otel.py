"""The OpenTelemetry SDK side of ``persistence.tracing`` (the optional ``[otel]`` extra): a tracer
provider per process (a forked worker makes its own) with a batch processor and the OTLP/HTTP
exporter, configured by the standard ``OTEL_*`` variables (endpoint, headers, service name,
``OTEL_BSP_SCHEDULE_DELAY``...). Imported by ``persistence.tracing`` on the first span only."""

from __future__ import annotations

import os
import threading
from contextvars import ContextVar

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    set_span_in_context,
)

from persistence.tracing import SpanRecord

DEFAULT_SERVICE = "onnx-reducer"

# the ids the next span takes (the job's span: ids derived from the job, see persistence.tracing)
_next_ids: ContextVar[tuple[int, int] | None] = ContextVar("onnx_reducer_next_span_ids", default=None)


class _JobIds(IdGenerator):
    """Random ids, except for a job's own span (its trace and span id are the job's)."""

    def __init__(self) -> None:
        self.random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        chosen = _next_ids.get()
        return chosen[1] if chosen else self.random.generate_span_id()

    def generate_trace_id(self) -> int:
        chosen = _next_ids.get()
        return chosen[0] if chosen else self.random.generate_trace_id()


class SdkExporter:
    def __init__(self) -> None:
        resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE})
        self.provider = TracerProvider(resource=resource, id_generator=_JobIds())
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.tracer: Tracer = self.provider.get_tracer("onnx-reducer")

    def send(self, span: SpanRecord) -> None:
        trace = span.trace
        flags = TraceFlags(TraceFlags.SAMPLED if trace.sampled else TraceFlags.DEFAULT)
        parent_id = trace.parent_span_id if span.is_job_span else trace.job_span_id
        context = Context()  # a root span unless it has a parent: never whatever span is current here
        if parent_id is not None:
            parent = SpanContext(trace.trace_id, parent_id, is_remote=True, trace_flags=flags)
            context = set_span_in_context(NonRecordingSpan(parent))
        token = _next_ids.set((trace.trace_id, trace.job_span_id) if span.is_job_span else None)
        try:
            started = self.tracer.start_span(
                span.name, context=context, attributes=span.attributes, start_time=span.start_ns
            )
        finally:
            _next_ids.reset(token)
        if span.error:
            started.set_status(Status(StatusCode.ERROR, span.error))
        started.end(end_time=max(span.end_ns, span.start_ns))

    def flush(self) -> bool:
        return self.provider.force_flush()


_lock = threading.Lock()
_exporters: dict[int, SdkExporter] = {}  # by process id: a forked worker starts its own


def exporter() -> SdkExporter:
    with _lock:
        pid = os.getpid()
        if pid not in _exporters:
            _exporters.clear()
            _exporters[pid] = SdkExporter()
        return _exporters[pid]

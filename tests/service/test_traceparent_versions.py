"""The job's trace follows W3C Trace Context (issue 29, review of issue 28): a ``traceparent`` of
version 00 is exactly its four fields; one of a later version is parsed by its first four fields
(what follows them must start with ``-``), as the recommendation asks of a receiver, so a CI
whose tracer moved to a newer version still parents the job's span; version ``ff`` is invalid."""

from __future__ import annotations

import pytest

from persistence.tracing import job_trace

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("traceparent", "sampled"),
    [
        (f"00-{TRACE_ID}-{SPAN_ID}-01", True),
        (f"01-{TRACE_ID}-{SPAN_ID}-01", True),
        (f"cc-{TRACE_ID}-{SPAN_ID}-00", False),
        (f"cc-{TRACE_ID}-{SPAN_ID}-09-what-the-future-adds", True),
        (f" CC-{TRACE_ID.upper()}-{SPAN_ID}-01 ", True),
    ],
)
def test_a_later_version_is_parsed_by_its_first_four_fields(traceparent: str, sampled: bool) -> None:
    trace = job_trace("job-1", traceparent)
    assert (trace.trace_id, trace.parent_span_id, trace.sampled) == (int(TRACE_ID, 16), int(SPAN_ID, 16), sampled)


@pytest.mark.parametrize(
    "traceparent",
    [
        f"ff-{TRACE_ID}-{SPAN_ID}-01",  # version ff is invalid
        f"00-{TRACE_ID}-{SPAN_ID}-01-extra",  # version 00 has exactly four fields
        f"cc-{TRACE_ID}-{SPAN_ID}-01extra",  # a later version's fifth field starts with "-"
        f"cc-{TRACE_ID}-{SPAN_ID}-1",
        f"0-{TRACE_ID}-{SPAN_ID}-01",
        f"cc-{'0' * 32}-{SPAN_ID}-01",
        f"cc-{TRACE_ID}-{'0' * 16}-01",
        f"cg-{TRACE_ID}-{SPAN_ID}-01",
        "",
    ],
)
def test_an_invalid_traceparent_makes_the_job_the_traces_root(traceparent: str) -> None:
    trace = job_trace("job-1", traceparent)
    assert trace.parent_span_id is None
    assert trace.trace_id == job_trace("job-1", None).trace_id

"""OpenTelemetry (issue 29): with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, the api and a real Celery
worker send a job's spans (its intake, each check, its end) to an OTLP collector stand-in, in the
trace of the ``TRACEPARENT`` ``onnx-reducer submit`` ran under: the job's span is the child of
that span, the intake and the checks children of the job's span. Without the variable no
tracing code and no OpenTelemetry tracing SDK or exporter is imported while a job runs."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from examples.build_example_model import build_example_model
from persistence.tracing import job_trace
from reducer_client.ci_context import PROVIDER_VARIABLES
from tests.service.conftest import Processes, start_api
from tests.service.helpers import OP_PRESENT_MUL, free_port, run_captured
from tests.service.otlp_receiver import ReceivedSpan, otlp_receiver

pytestmark = pytest.mark.slow

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CI_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CI_SPAN}-01"


def _of(spans: list[ReceivedSpan], job_id: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.attributes.get("job.id") == job_id]


def _complete(job_id: str, checks: int) -> Callable[[list[ReceivedSpan]], bool]:
    def done(spans: list[ReceivedSpan]) -> bool:
        names = [span.name for span in _of(spans, job_id)]
        return (
            "onnx-reducer job" in names
            and "onnx-reducer intake" in names
            and names.count("onnx-reducer check") >= checks
        )

    return done


def test_a_jobs_spans_reach_the_collector_parented_on_the_traceparent(
    processes: Processes, tokens: dict[str, str], tmp_path: Path
) -> None:
    with otlp_receiver() as collector:
        processes.env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        api_url = start_api(processes)
        processes.worker()
        token = tokens["team-a"]
        (tmp_path / "model.onnx").write_bytes(build_example_model().SerializeToString())
        (tmp_path / "spec.yaml").write_text(OP_PRESENT_MUL)
        env = {k: v for k, v in os.environ.items() if k not in PROVIDER_VARIABLES}
        env |= {"ONNX_REDUCER_SERVER": api_url, "ONNX_REDUCER_TOKEN": token, "TRACEPARENT": TRACEPARENT}
        submit = ["onnx-reducer", "submit", "model.onnx", "--check-spec", "spec.yaml", "--wait", "--json", "-o", "out"]
        done = run_captured(submit, env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        job_id, checks = summary["job_id"], summary["checks_run"]
        assert checks >= 1
        spans = _of(collector.wait_for(_complete(job_id, checks), f"job {job_id}'s spans"), job_id)

    job = next(span for span in spans if span.name == "onnx-reducer job")
    assert (job.trace_id, job.parent_span_id) == (TRACE_ID, CI_SPAN)
    assert job.span_id == f"{job_trace(job_id, TRACEPARENT).job_span_id:016x}"
    assert job.attributes["job.status"] == "succeeded" and not job.error
    assert job.attributes["job.checks_run"] == checks
    intake = next(span for span in spans if span.name == "onnx-reducer intake")
    check_spans = [span for span in spans if span.name == "onnx-reducer check"]
    assert len(check_spans) == checks
    for child in [intake, *check_spans]:
        assert (child.trace_id, child.parent_span_id) == (TRACE_ID, job.span_id)
    assert {span.attributes["check.verdict"] for span in check_spans} <= {"fail", "pass"}
    assert sorted(span.attributes["check.number"] for span in check_spans) == list(range(1, checks + 1))
    assert all(span.service == "onnx-reducer" for span in spans)


@pytest.mark.parametrize("endpoint", [False, True], ids=["no-endpoint", "endpoint"])
def test_without_an_endpoint_no_tracing_code_is_imported(endpoint: bool, tmp_path: Path) -> None:
    """The embedded service (api and runner in one process) runs a job under a TRACEPARENT: the
    tracing SDK, the exporter and ``persistence.otel`` are loaded only with an endpoint (one
    nobody listens on: the spans are lost, the job is not)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = run_captured([sys.executable, "-m", "tests.service.tracing_probe", TRACEPARENT], env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "succeeded" and result["checks"] >= 1
    if endpoint:
        assert "persistence.otel" in result["loaded"] and "opentelemetry.sdk.trace" in result["loaded"]
    else:
        assert result["loaded"] == []

"""Run by tests/service/test_tracing.py in a fresh interpreter: the embedded service (api and
runner in this process) reduces the reference example under the TRACEPARENT given as argument,
then prints the job's outcome and which tracing modules this process loaded, as one JSON line."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from examples.build_example_model import build_example_model
from tests.service.conftest import client_for
from tests.service.helpers import OP_PRESENT_MUL, wait_job
from tests.service.web_harness import embedded_service

TRACING_MODULES = ("persistence.otel", "opentelemetry.sdk.trace", "opentelemetry.exporter")


def main(traceparent: str) -> None:
    data = {"check_spec": OP_PRESENT_MUL, "labels": json.dumps({"traceparent": traceparent})}
    files = {"model": ("model.onnx", build_example_model().SerializeToString())}
    with (
        tempfile.TemporaryDirectory() as root,
        embedded_service(Path(root)) as service,
        client_for(service.url, service.token) as client,
    ):
        job = wait_job(client, client.post("/v1/jobs", files=files, data=data).json()["id"])
    loaded = sorted(m for m in sys.modules if m.startswith(TRACING_MODULES))
    print(json.dumps({"status": job["status"], "checks": job["progress"]["checks_run"], "loaded": loaded}))


if __name__ == "__main__":
    main(sys.argv[1])

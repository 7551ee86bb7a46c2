"""The S3 artifact store under faults (issue 30): a farm (the api, a second api on an empty data
folder, a Celery worker on its own data folder) runs real jobs against an S3 server that is
SIGKILLed in the middle of uploads (the api storing an upload, the worker storing an iteration
model) and of downloads (``GET /v1/jobs/{id}/artifacts/...`` fetched from the bucket), and restarted
on the same port with what it had acknowledged (``tests.service.s3_chaos``: moto's recorder as a
write-ahead log; blobs stay single-request uploads, see there). Afterwards:

- every artifact row's blob is in the bucket (0 rows without a blob);
- every download answered its bytes (200, the sha256 right) or a clear 503 with Retry-After, never
  a 500 nor a truncated 200; once the server is back it answers the bytes;
- the jobs end (succeeded) once the server is back."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import httpx
import pytest
from sqlalchemy import select

from persistence.db import Database
from persistence.models import Artifact
from tests.service.conftest import Processes, client_for, start_api
from tests.service.helpers import chain_model, submit, wait_job
from tests.service.s3_chaos import ChaosGate, RecordingS3, Trap
from tests.service.s3_server import ACCESS_KEY, SECRET_KEY

pytestmark = pytest.mark.slow
BUCKET = "chaos-artifacts"
UPLOAD = f"PUT /{BUCKET}/sha256/".encode()
DOWNLOAD = f"GET /{BUCKET}/sha256/".encode()
CAUGHT_S = 240.0  # a wait for the trapped transfer, not a measure


@pytest.fixture
def chaos(tmp_path: Path) -> Iterator[tuple[RecordingS3, ChaosGate]]:
    folder = tmp_path / "s3"
    folder.mkdir()
    server = RecordingS3(folder)
    server.start()
    gate = ChaosGate(server.port)
    try:
        yield server, gate
    finally:
        gate.close()
        server.stop()


def _in_thread(call: Callable[[], httpx.Response]) -> Callable[[], httpx.Response]:
    """Run ``call`` in a thread; the returned function waits for its answer."""
    answer: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: answer.append(call()), daemon=True)
    thread.start()

    def result() -> httpx.Response:
        thread.join(CAUGHT_S)
        assert answer, "no answer"
        return answer[0]

    return result


def _kill_when_caught(server: RecordingS3, trap: Trap) -> None:
    assert trap.caught.wait(CAUGHT_S), f"no {trap.head!r} went through the gate"
    server.kill()
    trap.released.set()


def _restart(server: RecordingS3, gate: ChaosGate) -> None:
    """The server back with its data: nobody reaches it before its log is replayed (a real server
    has its data when it starts listening; moto's replay takes a moment after)."""
    gate.accepting.clear()
    server.restart()
    gate.accepting.set()


def _clear(response: httpx.Response, expected: bytes | None = None) -> str:
    """A download's answer: its bytes whole (200) or a 503 saying to try again; never a 500."""
    if response.status_code == 503:
        assert response.headers.get("retry-after"), response.headers
        assert response.headers["content-type"].startswith("application/problem+json"), response.text
        return "503"
    assert response.status_code == 200, f"{response.status_code}: {response.text[:300]}"
    if expected is not None:
        assert hashlib.sha256(response.content).digest() == hashlib.sha256(expected).digest()
    return "200"


def _rows_without_blob(database: Database, server: RecordingS3) -> tuple[int, list[str]]:
    with database.session() as session:
        keys = sorted(set(session.scalars(select(Artifact.storage_key))))
    client = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    listed: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="sha256/"):
        listed |= {str(item["Key"]) for item in page.get("Contents", [])}
    return len(keys), [key for key in keys if key not in listed]


def test_s3_killed_mid_upload_and_mid_download_loses_nothing(
    chaos: tuple[RecordingS3, ChaosGate],
    processes: Processes,
    tokens: dict[str, str],
    database: Database,
    tmp_path: Path,
) -> None:
    server, gate = chaos
    processes.env.update(gate.server().env(BUCKET), JOB_LEASE_S="5")
    api_url = start_api(processes)
    reader_data = tmp_path / "reader-data"  # a second api: an empty cache, every download from the bucket
    reader_data.mkdir()
    reader_url = start_api_on(processes, reader_data)
    worker_data = tmp_path / "worker-data"
    worker_data.mkdir()
    processes.worker(DATA_DIR=str(worker_data))
    models = [chain_model(24, mul_at).SerializeToString() for mul_at in (9, 15)]
    answers: list[str] = []
    with client_for(api_url, tokens["team-a"]) as client, client_for(reader_url, tokens["team-a"]) as reader:
        # 1. killed while the api stores an upload
        trap = gate.arm(UPLOAD)
        refused = _in_thread(lambda: submit(client, models[0]))
        _kill_when_caught(server, trap)
        answer = refused()
        assert answer.status_code == 503, f"{answer.status_code}: {answer.text[:300]}"
        assert answer.headers.get("retry-after"), answer.headers
        _restart(server, gate)
        jobs = []
        for model in models:
            response = submit(client, model)
            assert response.status_code == 202, response.text
            jobs.append(response.json()["id"])

        # 2. killed while the worker stores an iteration model
        trap = gate.arm(UPLOAD)
        _kill_when_caught(server, trap)
        answers.append(_clear(reader.get(f"/v1/jobs/{jobs[0]}/artifacts/original"), models[0]))  # down: a 503
        _restart(server, gate)

        # 3. killed while the second api fetches an upload from the bucket to serve it
        trap = gate.arm(DOWNLOAD)
        began = time.monotonic()
        download = _in_thread(lambda: reader.get(f"/v1/jobs/{jobs[1]}/artifacts/original", timeout=CAUGHT_S))
        _kill_when_caught(server, trap)
        answers.append(_clear(download(), models[1]))
        answered_s = time.monotonic() - began  # reported, not asserted
        _restart(server, gate)
        answers.append(_clear(reader.get(f"/v1/jobs/{jobs[1]}/artifacts/original"), models[1]))

        ended = [wait_job(client, job_id, timeout=300) for job_id in jobs]
        assert [job["status"] for job in ended] == ["succeeded", "succeeded"], ended
        for job_id in jobs:  # every artifact of the ended jobs, from the bucket: whole
            for name in ("original", "min-bad", "iteration-1"):
                assert _clear(reader.get(f"/v1/jobs/{job_id}/artifacts/{name}")) == "200", name

    rows, missing = _rows_without_blob(database, server)
    print(f"\nS3 chaos: {rows} artifact rows, {len(missing)} without a blob; downloads answered {answers}")
    print(f"the download cut mid-way was answered after {answered_s:.1f} s")
    assert rows > 0
    assert missing == []
    assert answers[0] == "503" and answers[-1] == "200"


def start_api_on(processes: Processes, data: Path) -> str:
    """Another api (another machine): its own data folder, the same database and bucket."""
    folder = processes.env["DATA_DIR"]
    processes.env["DATA_DIR"] = str(data)
    try:
        return start_api(processes)
    finally:
        processes.env["DATA_DIR"] = folder

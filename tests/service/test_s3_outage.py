"""A worker's store rides out an S3 server that is down (issue 30: "nothing lost after MinIO
returns"): with ``outage_wait_s`` a store or fetch tries again while the server is unreachable and
succeeds once it is back; the api's store (no wait) fails at once with a transient error (its 503);
a refusal (a 4xx: a missing bucket) is no outage and is not waited out."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from persistence.s3store import ArtifactStoreError, S3ArtifactStore
from tests.service.s3_chaos import ChaosGate, RecordingS3
from tests.service.s3_server import S3Server

BUCKET = "outage-bucket"


class _Retrying(logging.Handler):
    """Set once the store logs that it tries again (it saw the outage)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "trying again" in record.getMessage():
            self.seen.set()


@pytest.fixture
def retrying() -> Iterator[_Retrying]:
    handler, logger = _Retrying(), logging.getLogger("onnx_reducer.store")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RecordingS3]:
    folder = tmp_path / "s3"
    folder.mkdir()
    server = RecordingS3(folder)
    try:
        yield server
    finally:
        server.stop()


def test_a_store_waits_out_a_server_that_is_down_and_stores_once_it_is_back(
    server: RecordingS3, retrying: _Retrying, tmp_path: Path
) -> None:
    """Before: the first unreachable try raised (a worker failed its job)."""
    server.start()
    gate = ChaosGate(server.port)  # closed while the server replays its log: nobody sees it half back
    config = gate.server().config(BUCKET, outage_wait_s=120.0)
    S3ArtifactStore(tmp_path / "setup", config).ensure_bucket()
    server.kill()
    worker_store = S3ArtifactStore(tmp_path / "worker", config)
    stored: list[str] = []
    storing = threading.Thread(target=lambda: stored.append(worker_store.put_stream([b"an iteration model"]).key))
    storing.start()
    assert retrying.seen.wait(60), "the store did not see the outage"
    gate.accepting.clear()
    server.restart()  # back, with what it had acknowledged
    gate.accepting.set()
    storing.join(120)
    assert stored, "the store gave up"
    assert S3ArtifactStore(tmp_path / "reader", config).path(stored[0]).read_bytes() == b"an iteration model"
    gate.close()


def test_the_apis_store_fails_at_once_with_a_transient_error(server: RecordingS3, tmp_path: Path) -> None:
    server.start()
    config = S3Server(server.endpoint).config(BUCKET)  # outage_wait_s 0: the api's
    S3ArtifactStore(tmp_path / "setup", config).ensure_bucket()
    server.kill()
    with pytest.raises(ArtifactStoreError) as caught:
        S3ArtifactStore(tmp_path / "api", config).put_stream([b"an upload"])
    assert caught.value.transient


def test_a_refusal_is_no_outage(server: RecordingS3, tmp_path: Path) -> None:
    server.start()
    config = S3Server(server.endpoint).config("never-made-bucket", outage_wait_s=120.0)
    with pytest.raises(ArtifactStoreError) as caught:
        S3ArtifactStore(tmp_path / "worker", config).put_stream([b"an iteration model"])
    assert not caught.value.transient

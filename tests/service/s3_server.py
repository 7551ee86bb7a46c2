"""A real S3 API server for the tests of the S3 artifact store: moto's standalone server
(``moto_server``) on a free port, as its own process, ready when it answers an S3 request."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx

from persistence.s3store import S3ArtifactStore, S3Config
from tests.service.helpers import free_port

ACCESS_KEY, SECRET_KEY = "test-access-key", "test-secret-key-not-a-real-one"


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def config(self, bucket: str, **options: object) -> S3Config:
        return S3Config(
            bucket=bucket,
            endpoint_url=self.endpoint,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            **options,  # type: ignore[arg-type]
        )

    def store(self, cache: Path, bucket: str, **options: object) -> S3ArtifactStore:
        """An S3 artifact store on ``bucket`` (made if missing) that caches blobs in ``cache``."""
        store = S3ArtifactStore(cache, self.config(bucket, **options))
        store.ensure_bucket()
        return store

    def client(self) -> Any:
        """A boto3 client of this server: what is in a bucket, seen past the store."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def env(self, bucket: str) -> dict[str, str]:
        """The settings of an api or worker using this server's ``bucket``."""
        return {
            "ARTIFACT_STORE": "s3",
            "S3_ENDPOINT_URL": self.endpoint,
            "S3_BUCKET": bucket,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        }


@contextmanager
def moto_server(log: Path) -> Iterator[S3Server]:
    port = free_port()
    command = [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    with open(log, "wb") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(endpoint, proc, log)
        yield S3Server(endpoint)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _wait_ready(endpoint: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    """Poll until the server answers S3's ListBuckets (a connection refused means not yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"moto_server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(endpoint + "/", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"moto_server did not answer within {timeout} s: {log.read_text()[-2000:]}")

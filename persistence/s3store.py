"""The S3-compatible artifact store (MinIO, Ceph, cloud S3) for a farm across machines.

The bucket holds the blobs under the same content-addressed keys as the local store
(``sha256/ab/abcdef...``); each machine keeps a local cache of them under its data folder, in the
local store's own layout. So ``S3ArtifactStore`` is the local store (the cache) plus the bucket
(the truth):

- writing (``put_stream``, ``put_file``, ``adopt``) first lands the blob in the local cache, as the
  local store does (a temporary file written while hashing, renamed into place), then uploads the
  finished file under its sha256 key; boto3's transfer manager uploads it in parts above
  ``multipart_threshold``. Hashing into a local temporary file first, rather than uploading to a
  temporary key and copying it, is deliberate: the key is only known once the last byte is hashed,
  a server-side copy of more than 5 GB needs a multipart copy of its own, an api or worker killed
  mid-way would leave temporary objects behind in the bucket, and the writer needs the file
  locally anyway (the api unpacks the model, the worker hardlinks iterations from it);
- ``path(key)`` materialises the blob into the local cache (downloaded to a temporary file, its
  sha256 checked against the key, renamed into place) and returns that path, so every caller that
  reads a local file works unchanged, on any machine;
- content already in the bucket is not uploaded again: it is touched (copied onto itself with new
  metadata), so its age tells the sweep (``worker/maintenance.py``) and job deletion
  (``persistence.retention``) that a job stored it again; should it vanish between the HEAD and
  the copy (removed as old and unreferenced), it is uploaded again;
- ``download_url`` gives a short-lived presigned GET URL (the api redirects downloads to it);
- every store first writes a marker, ``stored/<key>`` (an empty object, its age the time a job last
  began storing the blob), before it touches or uploads the blob: S3 has no conditional delete, so
  a job may touch the blob between the sweep's copy aside and its DELETE and write its artifact row
  only after its check, later than the sweep asks the database again. The sweep reads the marker
  after its DELETE: stored within the grace, the blob is put back (a job marking it after that
  read touches it after the DELETE, finds it gone and uploads it again). A marker is removed with
  its blob, and once the blob is put back (stored now: its own age says as much).

Credentials come from the settings (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, else boto3's
own chain: instance roles, ``~/.aws``); they are kept as secrets and never logged. The boto3
client is made per process (Celery forks its workers; a client is not fork-safe)."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from persistence.store import ArtifactStore, ArtifactStoreError, CorruptBlobError, StoredBlob
from reducer_core.verification import file_sha256

COPY_LIMIT = 5 * 2**30  # the largest object one CopyObject call may copy
ASIDE_PREFIX = "deleting/"  # a swept blob's copy while the sweep asks the database again (never listed as a blob)
MARK_PREFIX = "stored/"  # stored/<key>: when a job last began storing the blob (the sweep reads it after its DELETE)
log = logging.getLogger("onnx_reducer.store")
T = TypeVar("T")
__all__ = ["ArtifactStoreError", "CorruptBlobError", "S3ArtifactStore", "S3Config"]


@dataclass(frozen=True)
class S3Config:
    bucket: str
    endpoint_url: str | None = None
    public_endpoint_url: str | None = None  # presigned URLs: the address clients reach the store at
    region: str = "us-east-1"
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    presigned_downloads: bool = False
    presign_expiry_s: int = 300
    multipart_threshold: int = 64 * 2**20
    multipart_chunksize: int = 16 * 2**20
    create_bucket: bool = True
    outage_wait_s: float = 0.0  # how long a store or fetch waits out an unreachable store (0: fail at once)


class S3ArtifactStore(ArtifactStore):
    def __init__(self, cache_root: Path, config: S3Config) -> None:
        super().__init__(cache_root)
        self.config = config
        self._clients: dict[tuple[int, str | None], Any] = {}
        self._lock = threading.Lock()

    # -- the bucket ---------------------------------------------------------------------------

    def _client(self, endpoint: str | None = None) -> Any:
        endpoint = endpoint or self.config.endpoint_url
        slot = (os.getpid(), endpoint)
        with self._lock:
            client = self._clients.get(slot)
            if client is None:
                import boto3  # noqa: PLC0415 - boto3 is heavy: only a store configured for S3 pays it
                from botocore.config import Config  # noqa: PLC0415 - boto3 is heavy: only a store configured for S3 pays it

                client = boto3.client(
                    "s3",
                    endpoint_url=endpoint,
                    region_name=self.config.region,
                    aws_access_key_id=self.config.access_key_id,
                    aws_secret_access_key=self.config.secret_access_key,
                    config=Config(
                        signature_version="s3v4",
                        connect_timeout=5,
                        read_timeout=60,
                        retries={"max_attempts": 5, "mode": "standard"},
                    ),
                )
                self._clients = {k: v for k, v in self._clients.items() if k[0] == os.getpid()}
                self._clients[slot] = client
            return client

    def _transfer_config(self) -> Any:
        from boto3.s3.transfer import TransferConfig  # noqa: PLC0415 - boto3 is heavy: only a store configured for S3 pays it

        return TransferConfig(
            multipart_threshold=self.config.multipart_threshold,
            multipart_chunksize=self.config.multipart_chunksize,
        )

    def ensure_bucket(self) -> None:
        """Create the bucket when it is missing and ``create_bucket`` is set."""
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - boto3 is heavy: only a store configured for S3 pays it

        client = self._client()
        try:
            client.head_bucket(Bucket=self.config.bucket)
            return
        except ClientError as exc:
            if _status(exc) != 404 or not self.config.create_bucket:
                raise self._error("reach the bucket", exc) from exc
        except BotoCoreError as exc:
            raise self._error("reach the bucket", exc) from exc
        try:
            client.create_bucket(Bucket=self.config.bucket)
        except ClientError as exc:
            if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise self._error("create the bucket", exc) from exc

    def ready(self) -> str:
        """``ok`` when the bucket answers, else why not (for ``/readyz``; no secret in it)."""
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - boto3 is heavy: only a store configured for S3 pays it

        try:
            self._client().head_bucket(Bucket=self.config.bucket)
        except ClientError as exc:
            return f"error: {_code(exc) or _status(exc)}"
        except BotoCoreError as exc:
            return f"error: {type(exc).__name__}"
        return "ok"

    def _error(self, doing: str, exc: Exception) -> ArtifactStoreError:
        where = self.config.endpoint_url or "the default AWS endpoint"
        return ArtifactStoreError(
            f"Cannot {doing} '{self.config.bucket}' at {where} ({type(exc).__name__}: {_code(exc) or exc}); "
            "check S3_ENDPOINT_URL, S3_BUCKET and the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY).",
            transient=_is_outage(exc),
        )

    def _riding_out(self, action: Callable[[], T]) -> T:
        """``action``, tried again while the store is unreachable (``transient``), for up to
        ``outage_wait_s`` (a worker rides out a MinIO restart instead of giving its job up)."""
        deadline, delay, tries = time.monotonic() + self.config.outage_wait_s, 0.5, 0
        while True:
            try:
                return action()
            except ArtifactStoreError as exc:
                if not exc.transient or time.monotonic() + delay > deadline:
                    raise
                tries += 1
                level = logging.WARNING if tries == 1 else logging.DEBUG  # once per outage, not per try
                log.log(level, "artifact store unreachable (%s); trying again", type(exc.__cause__).__name__)
            # short sleeps: a cancel raised into this thread (worker.preparing) lands between them
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _head(self, key: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError  # noqa: PLC0415 - boto3 is heavy: only a store configured for S3 pays it

        try:
            head: dict[str, Any] = self._client().head_object(Bucket=self.config.bucket, Key=key)
        except ClientError as exc:
            if _status(exc) == 404:
                return None
            raise self._error("read from", exc) from exc
        return head

    def _upload(self, blob: StoredBlob) -> None:
        """Upload the cached blob unless the bucket has it; then only mark it stored now."""
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - boto3 is heavy: only a store configured for S3 pays it

        client, bucket = self._client(), self.config.bucket
        try:
            client.put_object(Bucket=bucket, Key=MARK_PREFIX + blob.key, Body=b"")
            head = self._head(blob.key)
            if head is not None and head.get("ContentLength") == blob.size and blob.size <= COPY_LIMIT:
                try:
                    client.copy_object(
                        Bucket=bucket,
                        Key=blob.key,
                        CopySource={"Bucket": bucket, "Key": blob.key},
                        Metadata={"stored": f"{time.time():.3f}"},
                        MetadataDirective="REPLACE",
                    )
                    return
                except ClientError as exc:
                    if _status(exc) != 404 and _code(exc) not in ("NoSuchKey", "404"):
                        raise
                    # removed since the HEAD (old and unreferenced): uploaded again below
            client.upload_file(
                str(self.local_path(blob.key)),
                bucket,
                blob.key,
                ExtraArgs={"Metadata": {"stored": f"{time.time():.3f}"}},
                Config=self._transfer_config(),
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._error("upload to", exc) from exc

    # -- the store's interface ----------------------------------------------------------------

    def path(self, key: str) -> Path:
        """The blob in the local cache, downloaded first when it is not there yet."""
        local = self.local_path(key)
        if local.is_file():
            return local
        return self._riding_out(lambda: self._fetch(key, local))

    def _fetch(self, key: str, local: Path) -> Path:
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - boto3 is heavy: only a store configured for S3 pays it

        tmp = self.temp_path()
        try:
            try:
                self._client().download_file(self.config.bucket, key, str(tmp), Config=self._transfer_config())
            except ClientError as exc:
                if _status(exc) == 404:
                    raise FileNotFoundError(f"artifact {key} is in neither the cache nor the bucket") from exc
                raise self._error("download from", exc) from exc
            except BotoCoreError as exc:
                raise self._error("download from", exc) from exc
            if file_sha256(tmp) != key.rsplit("/", 1)[-1]:
                raise CorruptBlobError(f"artifact {key} downloaded from the bucket does not match its sha256")
            self._install(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)
        return local

    def exists(self, key: str) -> bool:
        return super().exists(key) or self._head(key) is not None

    def adopt(self, tmp: Path, sha256: str, size: int) -> StoredBlob:
        blob = super().adopt(tmp, sha256, size)
        self._riding_out(lambda: self._upload(blob))
        return blob

    def put_file(self, path: Path) -> StoredBlob:
        blob = super().put_file(path)
        self._riding_out(lambda: self._upload(blob))
        return blob

    def delete(self, key: str) -> None:
        super().delete(key)
        self._client().delete_object(Bucket=self.config.bucket, Key=key)

    def download_url(self, key: str, filename: str) -> str | None:
        if not self.config.presigned_downloads:
            return None
        client = self._client(self.config.public_endpoint_url)
        url: str = client.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": self.config.bucket,
                "Key": key,
                "ResponseContentDisposition": f"attachment; filename*=UTF-8''{quote(filename)}",
            },
            ExpiresIn=self.config.presign_expiry_s,
        )
        return url

    def keys_stored_before(self, seconds: float) -> Iterator[str]:
        cutoff = time.time() - seconds
        pages = self._client().get_paginator("list_objects_v2").paginate(Bucket=self.config.bucket, Prefix="sha256/")
        for page in pages:
            for item in page.get("Contents", []):
                if item["LastModified"].timestamp() < cutoff:
                    yield str(item["Key"])

    def delete_if_stored_before(self, key: str, seconds: float, unreferenced: Callable[[], bool] | None = None) -> bool:
        """Delete the blob unless it was stored within ``seconds``. S3 has no conditional delete,
        so a job may store (mark) the blob between the HEAD and the DELETE: the object is first
        copied aside in the bucket (a server-side copy, in parts above ``multipart_threshold``),
        then deleted, then ``unreferenced`` (the caller's question to the database) is asked again
        and the blob's marker read: when a job's artifact row refers to it now, or a job marked it
        within ``seconds`` (it stored it and writes its row after its check), the copy is put back
        (stored now). An error after the copy (the database or the bucket unreachable) puts it
        back too; the copy aside is removed once the blob is back or gone for good. A copy a
        killed sweep left is handled by the next sweep (``recover_asides``)."""
        head = self._head(key)
        if head is not None and (_younger(head, seconds) or self._marked_within(key, seconds)):
            return False
        if head is None or unreferenced is None:
            self.delete(key)
            self._unmark(key)
            return head is not None
        aside = f"{ASIDE_PREFIX}{key}.{uuid.uuid4().hex}"
        client, bucket = self._client(), self.config.bucket
        self._copy(key, aside)
        try:
            self.delete(key)
            gone = unreferenced() and not self._marked_within(key, seconds)
        except BaseException:
            self._put_back(aside, key)  # unsure whether a row refers to it: keep the blob
            self._unmark(key)  # (stored now)
            client.delete_object(Bucket=bucket, Key=aside)
            raise
        if not gone:
            self._put_back(aside, key)
            log.warning("blob %s: a job came to refer to it or stored it while the sweep deleted it; put back", key)
        self._unmark(key)  # gone, or stored now: its own age says as much
        client.delete_object(Bucket=bucket, Key=aside)
        return gone

    def _marked_within(self, key: str, seconds: float) -> bool:
        """A job began storing ``key`` within ``seconds`` (its marker is that young)."""
        marker = self._head(MARK_PREFIX + key)
        return marker is not None and _younger(marker, seconds)

    def _unmark(self, key: str) -> None:
        self._client().delete_object(Bucket=self.config.bucket, Key=MARK_PREFIX + key)

    def _copy(self, source: str, target: str, extra: dict[str, Any] | None = None) -> None:
        """A server-side copy, in parts above ``multipart_threshold`` (CopyObject alone stops at 5 GiB)."""
        self._client().copy(
            {"Bucket": self.config.bucket, "Key": source},
            self.config.bucket,
            target,
            ExtraArgs=extra,
            Config=self._transfer_config(),
        )

    def _put_back(self, aside: str, key: str) -> None:
        """Copy ``aside`` back to ``key``, stored now (when this fails the copy aside stays)."""
        self._copy(aside, key, {"Metadata": {"stored": f"{time.time():.3f}"}, "MetadataDirective": "REPLACE"})

    def recover_asides(self, older_than_s: float, referenced: Callable[[list[str]], set[str]]) -> int:
        """Copies aside that a sweep killed between its steps left (``deleting/...`` older than
        ``older_than_s``): put back when an artifact row refers to the blob and the bucket lacks it,
        then removed. How many were put back."""
        client, bucket, cutoff = self._client(), self.config.bucket, time.time() - older_than_s
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=ASIDE_PREFIX)
        stale = [
            str(item["Key"])
            for page in pages
            for item in page.get("Contents", [])
            if item["LastModified"].timestamp() < cutoff
        ]
        owners = {aside: aside[len(ASIDE_PREFIX) :].rsplit(".", 1)[0] for aside in stale}
        wanted = referenced(sorted(set(owners.values()))) if owners else set()
        restored = 0
        for aside, key in owners.items():
            if key in wanted and self._head(key) is None:
                self._put_back(aside, key)
                log.warning("blob %s: put back from the copy a stopped sweep left aside", key)
                restored += 1
            if key not in wanted or self._head(key) is not None:
                self._unmark(key)  # gone for good, or there (stored now, or stored by a job since)
            client.delete_object(Bucket=bucket, Key=aside)
        return restored


def _is_outage(exc: Exception) -> bool:
    """The store could not be reached or failed on its side (a connection refused, cut or timed
    out, a 5xx), rather than refusing the request (a 4xx: credentials, a missing bucket)."""
    from botocore.exceptions import ClientError  # noqa: PLC0415 - boto3 is heavy: only a store configured for S3 pays it

    if isinstance(exc, ClientError):
        status = _status(exc)
        return status is None or status >= 500
    return True


def _younger(head: dict[str, Any], seconds: float) -> bool:
    """The object (its HEAD) was written within ``seconds``."""
    return bool(head["LastModified"].timestamp() >= time.time() - seconds)


def _status(exc: Exception) -> int | None:
    response = getattr(exc, "response", None) or {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))

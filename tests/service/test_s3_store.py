"""The S3-compatible artifact store against a real S3 API server (moto's standalone server in its
own process): blobs land in the bucket under their sha256 key, another machine (another cache
folder) reads them back, large blobs go up in parts, downloads can be presigned, and a blob that
does not match its key is refused."""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from persistence.config import ServiceSettings
from persistence.layout import DataLayout
from persistence.s3store import ArtifactStoreError, S3ArtifactStore
from persistence.store import ArtifactStore
from tests.service.s3_server import ACCESS_KEY, SECRET_KEY, S3Server, moto_server
from worker.prepared import unpack_original

MiB = 2**20


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


def test_a_streamed_blob_lands_in_the_bucket_and_another_machine_reads_it(s3: S3Server, tmp_path: Path) -> None:
    writer = s3.store(tmp_path / "machine-a", "stream-bucket")
    chunks = [os.urandom(100_000) for _ in range(5)]
    blob = writer.put_stream(iter(chunks))
    data = b"".join(chunks)
    assert blob.sha256 == hashlib.sha256(data).hexdigest() and blob.size == len(data)
    assert blob.key == f"sha256/{blob.sha256[:2]}/{blob.sha256}"
    stored = s3.client().get_object(Bucket="stream-bucket", Key=blob.key)["Body"].read()
    assert stored == data

    reader = s3.store(tmp_path / "machine-b", "stream-bucket")
    assert not reader.local_path(blob.key).exists(), "a fresh cache holds nothing yet"
    assert reader.exists(blob.key)
    with reader.open(blob.key) as handle:
        assert handle.read() == data
    assert reader.local_path(blob.key).read_bytes() == data, "read once, kept in the cache"
    assert reader.path(blob.key) == reader.local_path(blob.key)
    assert list((tmp_path / "machine-b" / "tmp").iterdir()) == [], "no temporary file left behind"


def test_put_file_above_the_threshold_uploads_in_parts(s3: S3Server, tmp_path: Path) -> None:
    store = s3.store(tmp_path / "cache", "parts-bucket", multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    model = tmp_path / "model.bin"
    model.write_bytes(os.urandom(11 * MiB))
    small = tmp_path / "small.bin"
    small.write_bytes(os.urandom(MiB))
    big_blob, small_blob = store.put_file(model), store.put_file(small)
    client = s3.client()
    big_head = client.head_object(Bucket="parts-bucket", Key=big_blob.key)
    small_head = client.head_object(Bucket="parts-bucket", Key=small_blob.key)
    assert big_head["ContentLength"] == 11 * MiB
    assert big_head["ETag"].strip('"').endswith("-3"), "three parts: 5 + 5 + 1 MiB"
    assert "-" not in small_head["ETag"], "below the threshold: one PUT"
    fresh = s3.store(tmp_path / "other-cache", "parts-bucket", multipart_threshold=5 * MiB)
    assert hashlib.sha256(fresh.path(big_blob.key).read_bytes()).hexdigest() == big_blob.sha256


def test_delete_removes_the_blob_from_the_bucket_and_the_cache(s3: S3Server, tmp_path: Path) -> None:
    store = s3.store(tmp_path / "cache", "delete-bucket")
    blob = store.put_stream([b"to be deleted"])
    assert store.local_path(blob.key).is_file()
    store.delete(blob.key)
    assert not store.local_path(blob.key).exists()
    assert not store.exists(blob.key)
    with pytest.raises(FileNotFoundError):
        store.path(blob.key)


def test_storing_again_makes_a_blob_young_for_the_sweep(s3: S3Server, tmp_path: Path) -> None:
    store = s3.store(tmp_path / "cache", "sweep-bucket")
    blob = store.put_stream([b"swept unless stored again"])
    assert blob.key in set(store.keys_stored_before(-60)), "older than a cutoff in the future"
    assert blob.key not in set(store.keys_stored_before(3600))
    assert not store.delete_if_stored_before(blob.key, 3600), "stored just now: kept"
    assert store.exists(blob.key)
    first = s3.client().head_object(Bucket="sweep-bucket", Key=blob.key)
    again = S3ArtifactStore(tmp_path / "another-cache", store.config).put_stream([b"swept unless stored again"])
    second = s3.client().head_object(Bucket="sweep-bucket", Key=blob.key)
    assert again.key == blob.key
    assert second["Metadata"]["stored"] > first["Metadata"]["stored"], "touched, not uploaded as new content"
    assert store.delete_if_stored_before(blob.key, -60)
    assert not store.exists(blob.key)


def test_a_presigned_url_downloads_the_blob_as_an_attachment(s3: S3Server, tmp_path: Path) -> None:
    store = s3.store(tmp_path / "cache", "presign-bucket", presigned_downloads=True, presign_expiry_s=120)
    blob = store.put_stream([b"presigned bytes"])
    url = store.download_url(blob.key, "job-min-bad.onnx")
    assert url is not None and "X-Amz-Expires=120" in url
    response = httpx.get(url)
    assert response.status_code == 200 and response.content == b"presigned bytes"
    assert "job-min-bad.onnx" in response.headers["content-disposition"]
    assert "X-Amz-Signature=" in url, "signed: the client needs no credentials of its own"
    unsigned = s3.store(tmp_path / "cache2", "presign-bucket")  # the default: the api streams
    assert unsigned.download_url(blob.key, "x.onnx") is None
    assert ArtifactStore(tmp_path / "local").download_url(blob.key, "x.onnx") is None


def test_a_blob_that_does_not_match_its_key_is_refused(s3: S3Server, tmp_path: Path) -> None:
    store = s3.store(tmp_path / "cache", "tamper-bucket")
    sha = hashlib.sha256(b"the real content").hexdigest()
    key = ArtifactStore.key_for(sha)
    s3.client().put_object(Bucket="tamper-bucket", Key=key, Body=b"something else")
    with pytest.raises(ArtifactStoreError, match="does not match its sha256"):
        store.path(key)
    assert not store.local_path(key).exists(), "nothing wrong enters the cache"


def test_an_unreachable_store_says_what_to_check(tmp_path: Path) -> None:
    store = S3ArtifactStore(
        tmp_path / "cache", S3Server("http://127.0.0.1:9").config("nowhere-bucket", create_bucket=False)
    )
    with pytest.raises(ArtifactStoreError) as caught:
        store.ensure_bucket()
    assert "S3_ENDPOINT_URL" in str(caught.value) and SECRET_KEY not in str(caught.value)
    assert store.ready().startswith("error: ")


def test_a_missing_bucket_is_not_ready_and_created_only_when_allowed(s3: S3Server, tmp_path: Path) -> None:
    forbidden = S3ArtifactStore(tmp_path / "cache", s3.config("never-created", create_bucket=False))
    assert forbidden.ready() == "error: 404"
    with pytest.raises(ArtifactStoreError, match="never-created"):
        forbidden.ensure_bucket()
    allowed = s3.store(tmp_path / "cache2", "created-at-start")
    assert allowed.ready() == "ok"


def test_settings_choose_the_store_and_keep_the_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "ARTIFACT_STORE": "s3",
        "S3_ENDPOINT_URL": "http://minio:9000",
        "S3_BUCKET": "artifacts",
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "S3_PRESIGN_EXPIRY_S": "60",
    }.items():
        monkeypatch.setenv(name, value)
    settings = ServiceSettings(data_dir=tmp_path)
    assert SECRET_KEY not in repr(settings) and SECRET_KEY not in str(settings.model_dump())
    config = settings.s3_config()
    assert config is not None and SECRET_KEY not in repr(config)
    assert (config.bucket, config.endpoint_url) == ("artifacts", "http://minio:9000")
    assert config.secret_access_key == SECRET_KEY
    assert config.presign_expiry_s == 60 and not config.presigned_downloads
    assert isinstance(DataLayout(tmp_path, config).store, S3ArtifactStore)
    monkeypatch.delenv("S3_BUCKET")
    with pytest.raises(ValidationError, match="S3_BUCKET"):
        ServiceSettings(data_dir=tmp_path)
    monkeypatch.setenv("ARTIFACT_STORE", "local")
    local = ServiceSettings(data_dir=tmp_path)
    assert local.s3_config() is None
    assert type(DataLayout(tmp_path, local.s3_config()).store) is ArtifactStore


def test_a_worker_rebuilds_a_job_model_folder_from_the_stored_upload(s3: S3Server, tmp_path: Path) -> None:
    api_side = s3.store(tmp_path / "api-cache", "upload-bucket")
    model = b"single model bytes"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("nets/model.onnx", b"bundled model")
        archive.writestr("nets/weights.bin", b"\0" * 64)
    single, bundle = api_side.put_stream([model]), api_side.put_stream([buffer.getvalue()])

    worker_side = s3.store(tmp_path / "worker-data" / "artifacts", "upload-bucket")
    jobs = tmp_path / "worker-data" / "jobs"
    unpack_original(worker_side, jobs / "one" / "model", single.key, False, "net.onnx")
    assert (jobs / "one" / "model" / "net.onnx").read_bytes() == model
    unpack_original(worker_side, jobs / "two" / "model", bundle.key, True, "model.onnx")
    assert (jobs / "two" / "model" / "nets" / "model.onnx").read_bytes() == b"bundled model"
    assert (jobs / "two" / "model" / "nets" / "weights.bin").stat().st_size == 64
    unpack_original(worker_side, jobs / "two" / "model", bundle.key, True, "model.onnx")  # lost a race: fine
    assert sorted(p.name for p in (jobs / "two").iterdir()) == ["model"], "no staging folder left behind"

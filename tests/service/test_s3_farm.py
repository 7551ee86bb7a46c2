"""A farm whose machines share nothing but PostgreSQL, Redis and an S3-compatible object store
(moto's standalone server here; MinIO in docker-compose): the api stores uploads in the bucket and
streams downloads or redirects them to presigned URLs, and a Celery worker on a data folder of its own (an empty
cache) reduces a job whose model and weights exist only in the bucket, writing its iterations
back through it."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import onnx
import pytest

from persistence.store import ArtifactStore
from reducer_client import ReducerClient
from tests.service.conftest import Processes, client_for, start_api
from tests.service.helpers import chain_model, model_with_weights_next_to_it, submit, tar_bundle, wait_job
from tests.service.s3_server import S3Server, moto_server

pytestmark = pytest.mark.slow
BUCKET = "farm-artifacts"


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3Server]:
    with moto_server(tmp_path / "moto.log") as server:
        yield server


def _bundle_with_weights(folder: Path) -> bytes:
    """A tar of a model whose weights live in an external-data file beside it."""
    folder.mkdir()
    model_with_weights_next_to_it(folder, (2, 3), (2.0, 3.0))
    return tar_bundle({name: (folder / name).read_bytes() for name in ("model.onnx", "weights.bin")})


def _key(data: bytes) -> str:
    return ArtifactStore.key_for(hashlib.sha256(data).hexdigest())


def test_the_api_stores_uploads_in_the_bucket_and_serves_them_from_any_machine(
    s3: S3Server, processes: Processes, tokens: dict[str, str], tmp_path: Path
) -> None:
    processes.env.update(s3.env(BUCKET), S3_PRESIGNED_DOWNLOADS="true")
    api_url = start_api(processes)
    ready = httpx.get(api_url + "/readyz").json()
    assert ready["checks"]["artifact_store"] == "ok", ready
    model = chain_model(8, 5).SerializeToString()
    with client_for(api_url, tokens["team-a"]) as client:
        response = submit(client, model)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        redirect = client.get(f"/v1/jobs/{job_id}/artifacts/original")
    assert redirect.status_code == 307
    location = redirect.headers["location"]
    assert location.startswith(f"{s3.endpoint}/{BUCKET}/{_key(model)}?") and "X-Amz-Signature=" in location
    downloaded = httpx.get(location)  # no team token: the URL itself grants this one download, briefly
    assert downloaded.content == model and "model.onnx" in downloaded.headers["content-disposition"]
    with ReducerClient(api_url, tokens["team-a"]) as reducer:  # what `onnx-reducer download` uses
        saved = reducer.download(job_id, "original", tmp_path / "client")
    assert saved.read_bytes() == model

    # an api on another machine (an empty data folder), streaming instead of redirecting
    other_data = tmp_path / "other-api-data"
    other_data.mkdir()
    processes.env.update(DATA_DIR=str(other_data), S3_PRESIGNED_DOWNLOADS="false")
    other_url = start_api(processes)
    with client_for(other_url, tokens["team-a"]) as client, client_for(other_url, tokens["team-b"]) as other:
        streamed = client.get(f"/v1/jobs/{job_id}/artifacts/original")
        foreign = other.get(f"/v1/jobs/{job_id}/artifacts/original")
    assert streamed.status_code == 200 and streamed.content == model
    assert foreign.status_code == 404, "team-scoped as ever"


def test_a_worker_on_another_data_folder_reduces_a_job_that_only_the_bucket_holds(
    s3: S3Server, processes: Processes, tokens: dict[str, str], data_dir: Path, tmp_path: Path
) -> None:
    processes.env.update(s3.env(BUCKET))
    api_url = start_api(processes)
    worker_data = tmp_path / "worker-data"  # another machine: nothing of the api's folder is there
    worker_data.mkdir()
    processes.worker(DATA_DIR=str(worker_data))
    bundle = _bundle_with_weights(tmp_path / "upload")
    with client_for(api_url, tokens["team-a"]) as client:
        response = submit(client, bundle, filename="model.tar")
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        job = wait_job(client, job_id)
        assert job["status"] == "succeeded", job
        assert (job["nodes_before"], job["nodes_after"]) == (3, 1)
        api_cache_before = {p.name for p in (data_dir / "artifacts" / "sha256").glob("*/*")}
        min_bad = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad")
        iteration = client.get(f"/v1/jobs/{job_id}/artifacts/iteration-1")

    assert min_bad.status_code == 200, "streamed by the api (the default)"
    assert [n.op_type for n in onnx.load_from_string(min_bad.content).graph.node] == ["Mul"]
    min_bad_key = _key(min_bad.content)
    assert (worker_data / "artifacts" / min_bad_key).is_file(), "written by the worker through its cache"
    assert min_bad_key.rsplit("/", 1)[1] not in api_cache_before, "the api never had it: it came from the bucket"
    assert (data_dir / "artifacts" / min_bad_key).is_file(), "fetched into the api's cache to stream it"
    assert (worker_data / "jobs" / job_id / "model" / "weights.bin").is_file(), "unpacked from the stored upload"
    with tarfile.open(fileobj=io.BytesIO(iteration.content)) as archive:  # assembled by the api from the bucket
        members = {member.name: archive.extractfile(member).read() for member in archive}  # type: ignore[union-attr]
    weights = {name: data for name, data in members.items() if name != "iteration-1.onnx"}
    assert "iteration-1.onnx" in members and len(weights) >= 1, list(members)
    for data in weights.values():  # the worker stored them; the api fetched them into its cache
        assert _key(data).rsplit("/", 1)[1] not in api_cache_before
        assert (data_dir / "artifacts" / _key(data)).is_file()

"""The S3 sweep's last window (issue 30): a job that stores a blob again between the sweep's copy
aside and its DELETE, and writes its artifact row only after its check (later than the sweep asks
the database again), kept nothing before: the sweep saw no row and dropped its copy. Every store
now writes a marker (``stored/<key>``) before it touches the blob; the sweep reads it after its
DELETE and puts the blob back when it is younger than the grace. Blobs above CopyObject's limit
(5 GiB; lowered here) are copied aside in parts instead of deleted without a copy.

The blob's age is the only thing simulated: the sweeping machine's HEAD reports a ``sha256/`` blob
two hours older than the server says (moto cannot backdate an object); markers, rows, copies and
deletes are real (moto's standalone server, real PostgreSQL)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from persistence import s3store
from persistence.db import Database
from persistence.enums import ArtifactKind
from persistence.repositories import ArtifactRepository, TeamRepository
from persistence.retention import still_unreferenced
from persistence.s3store import S3ArtifactStore
from persistence.store import StoredBlob
from tests.service.helpers import stored_job
from tests.service.s3_server import S3Server, moto_server

GRACE_S = 3600.0
BUCKET = "marker-bucket"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


def _aged(store: S3ArtifactStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweeping machine sees every blob as stored two hours ago (markers as they are)."""
    head = store._head

    def aged_head(key: str) -> dict[str, Any] | None:
        found = head(key)
        if found is not None and key.startswith("sha256/"):
            found = {**found, "LastModified": found["LastModified"] - dt.timedelta(hours=2)}
        return found

    monkeypatch.setattr(store, "_head", aged_head)


def _refer_to(database: Database, blob: StoredBlob, team: str) -> None:
    with database.session() as session:
        job_id = stored_job(session, TeamRepository(session).get_or_create(team).id).id
        ArtifactRepository(session).put(job_id, ArtifactKind.ITERATION, "iteration-1", blob, {})


def _during_delete(store: S3ArtifactStore, monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]) -> None:
    """Run ``action`` just before the sweep's DELETE reaches the bucket (after its copy aside)."""
    delete = store.delete

    def act_then_delete(key: str) -> None:
        action()
        delete(key)

    monkeypatch.setattr(store, "delete", act_then_delete)


def test_a_job_storing_the_blob_during_the_sweeps_delete_and_recording_it_later_keeps_it(
    s3: S3Server, database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the sweep removed the blob (counted 1) and the job's later row referred to nothing
    ('in neither the cache nor the bucket' on another machine)."""
    sweeper = S3ArtifactStore(tmp_path / "sweeper", s3.config(BUCKET))
    sweeper.ensure_bucket()
    content = b"a candidate stored again"
    blob = sweeper.put_stream([content])
    job_machine = S3ArtifactStore(tmp_path / "job", s3.config(BUCKET))
    _aged(sweeper, monkeypatch)
    _during_delete(sweeper, monkeypatch, lambda: job_machine.put_stream([content]))

    removed = sweeper.delete_if_stored_before(blob.key, GRACE_S, still_unreferenced(database, blob.key))
    _refer_to(database, blob, "team-late-row")  # the job's verdict, after the sweep

    assert removed is False
    reader = S3ArtifactStore(tmp_path / "reader", s3.config(BUCKET))
    assert reader.path(blob.key).read_bytes() == content
    assert not list(_keys(sweeper, "deleting/")), "the copy aside is removed"


def test_an_old_unmarked_unreferenced_blob_and_its_marker_are_removed(
    s3: S3Server, database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marker does not keep a blob nobody stored lately: both go (the marker is old here)."""
    sweeper = S3ArtifactStore(tmp_path / "sweeper", s3.config(BUCKET + "-2"))
    sweeper.ensure_bucket()
    blob = sweeper.put_stream([b"nobody's any more"])
    _aged(sweeper, monkeypatch)
    assert sweeper.delete_if_stored_before(blob.key, -60, still_unreferenced(database, blob.key)) is True
    assert list(_keys(sweeper, "")) == []


def test_a_blob_above_the_copy_limit_is_copied_aside_in_parts_and_put_back(
    s3: S3Server, database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a blob above CopyObject's 5 GiB was deleted with no copy aside, so a row appearing
    meanwhile referred to nothing. The limit is lowered to 1 MiB here and the multipart threshold
    to 5 MiB, so the 6 MiB blob is copied aside (and back) in parts."""
    monkeypatch.setattr(s3store, "COPY_LIMIT", 2**20)
    config = s3.config(BUCKET + "-3", multipart_threshold=5 * 2**20, multipart_chunksize=5 * 2**20)
    sweeper = S3ArtifactStore(tmp_path / "sweeper", config)
    sweeper.ensure_bucket()
    content = bytes(range(256)) * (6 * 2**12)  # 6 MiB
    blob = sweeper.put_stream([content])
    _aged(sweeper, monkeypatch)
    _during_delete(sweeper, monkeypatch, lambda: _refer_to(database, blob, "team-big"))

    removed = sweeper.delete_if_stored_before(blob.key, -60, still_unreferenced(database, blob.key))

    assert removed is False
    assert S3ArtifactStore(tmp_path / "reader", config).path(blob.key).read_bytes() == content
    assert not list(_keys(sweeper, "deleting/"))


def _keys(store: S3ArtifactStore, prefix: str) -> Iterator[str]:
    pages = store._client().get_paginator("list_objects_v2").paginate(Bucket=store.config.bucket, Prefix=prefix)
    for page in pages:
        yield from (str(item["Key"]) for item in page.get("Contents", []))

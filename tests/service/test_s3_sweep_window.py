"""The unreferenced-blob sweep against a real S3 API server (moto's standalone server) and real
PostgreSQL: S3 has no conditional delete, so a job's artifact row may come to refer to a blob
between the sweep's look (old, unreferenced) and its DELETE. The sweep asks the database again
once the object is deleted and puts it back from a copy it made aside (issue 30, the S3 window).
A sweep stopped between its steps leaves that copy (or, in the local store, the renamed blob): the
next sweep puts it back where a row refers to it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from persistence.db import Database
from persistence.enums import ArtifactKind
from persistence.repositories import ArtifactRepository, TeamRepository
from persistence.s3store import S3ArtifactStore
from persistence.store import ArtifactStore, StoredBlob
from tests.service.helpers import stored_job
from tests.service.s3_server import S3Server, moto_server
from worker import maintenance
from worker.maintenance import sweep_unreferenced_blobs

BUCKET = "window-bucket"
CONTENT = b"a candidate two jobs store"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


def _sweeper_store(s3: S3Server, tmp_path: Path, bucket: str) -> S3ArtifactStore:
    """The sweeping machine's store, its bucket made."""
    return s3.store(tmp_path / "sweeper", bucket)


def _bucket_keys(s3: S3Server, bucket: str) -> list[str]:
    return sorted(item["Key"] for item in s3.client().list_objects_v2(Bucket=bucket).get("Contents", []))


def _new_job(database: Database, team: str) -> str:
    with database.session() as session:
        return stored_job(session, TeamRepository(session).get_or_create(team).id).id


def _refer_to(database: Database, job_id: str, blob: StoredBlob) -> None:
    """The job's artifact row that refers to the blob."""
    with database.session() as session:
        ArtifactRepository(session).put(job_id, ArtifactKind.ITERATION, "iteration-1", blob, {})


def test_a_blob_a_job_comes_to_refer_to_while_the_sweep_deletes_it_is_put_back(
    s3: S3Server, database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep finds the blob old and unreferenced; just before its DELETE reaches the bucket a
    job's artifact row referring to the blob commits (the window, made exact by running that commit
    inside the store's delete). Afterwards the blob is in the bucket (another machine, with an
    empty cache, reads it), the sweep counts nothing removed, and no copy is left aside (before:
    removed, and the job's artifact answered 'in neither the cache nor the bucket')."""
    store = _sweeper_store(s3, tmp_path, BUCKET)
    blob = store.put_stream([CONTENT])
    job_id = _new_job(database, "team-window")
    delete = store.delete

    def a_job_refers_to_it_then_delete(key: str) -> None:
        _refer_to(database, job_id, blob)
        delete(key)

    monkeypatch.setattr(store, "delete", a_job_refers_to_it_then_delete)
    removed = sweep_unreferenced_blobs(database, store, -60)  # a cutoff in the future: every blob is old
    assert removed == 0
    another_machine = S3ArtifactStore(tmp_path / "reader", s3.config(BUCKET))
    assert another_machine.path(blob.key).read_bytes() == CONTENT
    assert _bucket_keys(s3, BUCKET) == [blob.key]


def test_an_unreferenced_old_blob_is_still_removed(s3: S3Server, database: Database, tmp_path: Path) -> None:
    """Nothing came to refer to it: deleted from the bucket, the copy aside too."""
    store = _sweeper_store(s3, tmp_path, BUCKET + "-2")
    blob = store.put_stream([b"nobody's"])
    assert sweep_unreferenced_blobs(database, store, -60) == 1
    assert not store.exists(blob.key)
    assert not S3ArtifactStore(tmp_path / "reader", store.config).exists(blob.key)
    assert _bucket_keys(s3, BUCKET + "-2") == []


class DatabaseUnreachableError(Exception):
    """What the sweep's second look raises in the test below (PostgreSQL gone in production)."""


def test_a_failing_second_look_keeps_the_blob(s3: S3Server, tmp_path: Path) -> None:
    """The database cannot be asked again once the object is deleted (unreachable): the sweep
    cannot know whether a row refers to the blob, so it puts the blob back and removes its copy
    aside, then raises (before: the copy aside was removed too, and with it the only copy)."""
    store = _sweeper_store(s3, tmp_path, BUCKET + "-3")
    blob = store.put_stream([b"maybe someone's"])

    def database_unreachable() -> bool:
        raise DatabaseUnreachableError

    with pytest.raises(DatabaseUnreachableError):
        store.delete_if_stored_before(blob.key, -60, database_unreachable)
    assert _bucket_keys(s3, BUCKET + "-3") == [blob.key]
    assert S3ArtifactStore(tmp_path / "reader", store.config).path(blob.key).read_bytes() == b"maybe someone's"


def test_the_next_sweep_puts_back_what_a_stopped_sweep_left_aside(
    s3: S3Server, database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep killed after its DELETE and before its put-back leaves the blob only in its copy
    aside. The next sweep puts back such copies when a row refers to the blob and drops the others;
    no ``deleting/`` object is left (before: copies aside stayed forever, the blob stayed gone)."""
    bucket = BUCKET + "-4"
    store = _sweeper_store(s3, tmp_path, bucket)
    kept, dropped = store.put_stream([b"a job's candidate"]), store.put_stream([b"nobody's candidate"])
    client = store._client()
    for blob in (kept, dropped):  # what a killed sweep leaves: the copy aside, the blob deleted
        client.copy_object(
            Bucket=bucket, Key=f"deleting/{blob.key}.0f0f", CopySource={"Bucket": bucket, "Key": blob.key}
        )
        store.delete(blob.key)
    _refer_to(database, _new_job(database, "team-aside"), kept)
    monkeypatch.setattr(maintenance, "ASIDE_STALE_S", -60)  # every copy aside counts as left by a stopped sweep
    assert sweep_unreferenced_blobs(database, store, 3600) == 0
    assert _bucket_keys(s3, bucket) == [kept.key]
    assert S3ArtifactStore(tmp_path / "reader", store.config).path(kept.key).read_bytes() == b"a job's candidate"


def test_the_next_sweep_puts_back_what_a_stopped_sweep_moved_aside_in_the_local_store(
    database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local store's sweep renames a blob into ``tmp/`` before it asks the database again; a
    sweep killed there leaves it only in ``tmp/``. The next sweep links it back when a row refers to
    it and removes the others (before: the blob stayed gone and the file in ``tmp/`` forever)."""
    store = ArtifactStore(tmp_path / "data")
    kept, dropped = store.put_stream([b"a job's model"]), store.put_stream([b"nobody's model"])
    for blob in (kept, dropped):  # what a killed sweep leaves: the blob renamed aside
        os.rename(store.local_path(blob.key), store.tmp_dir / f"{blob.sha256}.0f0f.deleting")
    _refer_to(database, _new_job(database, "team-aside"), kept)
    monkeypatch.setattr(maintenance, "ASIDE_STALE_S", -60)  # every file aside counts as left by a stopped sweep
    assert sweep_unreferenced_blobs(database, store, 3600) == 0
    assert store.local_path(kept.key).read_bytes() == b"a job's model"
    assert not store.exists(dropped.key)
    assert list(store.tmp_dir.iterdir()) == []

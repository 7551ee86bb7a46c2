"""Housekeeping of the artifact store: blobs that no artifact row refers to are deleted once they
are older than the longest a check can run (a cancelled or killed check leaves its iteration
model stored but never recorded; a deleted job leaves the blobs that were not old enough then).
A blob's age is the time since it was last stored (``persistence.store``): a job of any team that
stores the same content again makes it young again, and ``delete_if_stored_before`` reads that age
again atomically with the removal; it also asks the database again once the blob is aside (S3 has
no conditional delete: a job whose artifact row appeared meanwhile gets the blob put back)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from persistence.db import Database
from persistence.repositories import ArtifactRepository
from persistence.retention import still_unreferenced
from persistence.store import ArtifactStore

BATCH = 500
ASIDE_STALE_S = 3600.0  # a copy aside older than this was left by a sweep that was stopped between its steps


def sweep_unreferenced_blobs(db: Database, store: ArtifactStore, min_age_s: float) -> int:
    """Delete the blobs stored more than ``min_age_s`` ago that no artifact refers to; how many.
    First, blobs a stopped sweep left aside are put back where a row refers to them."""
    store.recover_asides(ASIDE_STALE_S, lambda keys: _referenced(db, keys))
    removed = 0
    for keys in _batches(store.keys_stored_before(min_age_s), BATCH):
        with db.session() as session:
            referenced = ArtifactRepository(session).referenced(keys)
        for key in keys:
            if key not in referenced and store.delete_if_stored_before(key, min_age_s, still_unreferenced(db, key)):
                removed += 1
    return removed


def _referenced(db: Database, keys: list[str]) -> set[str]:
    with db.session() as session:
        return set(ArtifactRepository(session).referenced(keys))


def _batches(keys: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for key in keys:
        batch.append(key)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch

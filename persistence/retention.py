"""Deleting a job and enforcing the retention settings.

A job is deleted once it has finished (the api cancels a running one first): its row goes, and
with it (ON DELETE CASCADE) its iterations, events, check units and artifact rows; its folder
under ``DATA_DIR/jobs`` goes too. A stored blob is removed only when no artifact row refers to it
any more, so what another job shares (the same uploaded model, the same candidate) stays. Blobs
that cannot be judged safely now are left to the unreferenced-blob sweep (``worker/maintenance.py``),
which removes them once old: those stored in the last ``RECENTLY_STORED_S`` (an upload of the same
content may be about to record it) and all of them while a queued or running job works on the same
model (its checks store candidates before recording them).

Retention (``RETENTION_MAX_AGE_S``, ``RETENTION_MAX_TEAM_BYTES``) runs in every worker's heartbeat
(``worker/presence.py``), in the distributed farm and in the embedded server alike; deleting the
same job twice is harmless (the second finds no row)."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from persistence.db import Database
from persistence.layout import DataLayout
from persistence.models import utcnow
from persistence.repositories import ArtifactRepository
from persistence.repositories.retention import RetentionRepository
from persistence.store import ArtifactStore

RECENTLY_STORED_S = 30.0
AGE_BATCH = 200


@dataclass(frozen=True)
class DeletedJob:
    job_id: str
    blobs_removed: int


def delete_finished_job(db: Database, layout: DataLayout, job_id: str) -> DeletedJob | None:
    """Delete a finished job and what only it refers to; None when it is gone or not finished."""
    with db.session() as session:
        retention = RetentionRepository(session)
        keys = retention.blob_keys_of(job_id)
        model_sha256 = retention.delete_finished(job_id)
    if model_sha256 is None:
        return None
    shutil.rmtree(layout.job_dir(job_id), ignore_errors=True)
    return DeletedJob(job_id, _remove_unreferenced(db, layout.store, keys, model_sha256))


def _remove_unreferenced(db: Database, store: ArtifactStore, keys: Iterable[str], model_sha256: str) -> int:
    keys = list(keys)
    with db.session() as session:
        if RetentionRepository(session).active_with_model(model_sha256):
            return 0
        referenced = ArtifactRepository(session).referenced(keys)
    return sum(1 for key in keys if key not in referenced and store.delete_if_stored_before(key, RECENTLY_STORED_S))


def enforce_retention(db: Database, layout: DataLayout, max_age_s: float, max_team_bytes: int) -> list[DeletedJob]:
    """Delete the finished jobs older than ``max_age_s`` (since they finished), then, per team whose
    jobs' artifacts exceed ``max_team_bytes``, its oldest finished jobs until it fits. 0: no limit."""
    victims: list[str] = []
    with db.session() as session:
        retention = RetentionRepository(session)
        if max_age_s > 0:
            victims += retention.finished_before(utcnow() - timedelta(seconds=max_age_s), AGE_BATCH)
        if max_team_bytes > 0:
            for team_id, team_total in sorted(retention.team_bytes().items()):
                remaining = team_total
                for job_id, size in retention.finished_oldest_first(team_id):
                    if remaining <= max_team_bytes:
                        break
                    if job_id not in victims:
                        victims.append(job_id)
                    remaining -= size
    deleted = [delete_finished_job(db, layout, job_id) for job_id in victims]
    return [job for job in deleted if job is not None]

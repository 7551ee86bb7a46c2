"""Deleting a job and enforcing the retention settings.

A job is deleted once it has finished (the api cancels a running one first): its row goes, and
with it (ON DELETE CASCADE) its iterations, events, check units and artifact rows, and in the same
transaction the farm verdicts its checks shared (a deleted job's verdicts answer no later job); its
folder under ``DATA_DIR/jobs`` goes too.

A stored blob's lifetime is decided by reference, never by whose job is deleted: the store is
content-addressed, so a blob of the deleted job may be byte for byte another job's, of any team and
any uploaded container (a ``.onnx`` and a ``.tar`` holding it give other ``model_sha256`` but the
same candidates). Such a job refers to it in one of two ways: an artifact row, or (a running
check's model, stored before its check and recorded after its verdict) by having stored it within
the longest a check can run; storing content that is already there marks it stored again
(``persistence.store``). So a blob is removed only when no artifact row refers to it AND nothing
stored it for ``blob_grace_s`` (``blob_grace_s()``: the job time limit, which bounds every check,
plus an hour; the same age as the unreferenced-blob sweep, ``worker/maintenance.py``), and the
store re-checks that age atomically with the removal. Blobs not old enough stay for the sweep.

Retention (``RETENTION_MAX_AGE_S``, ``RETENTION_MAX_TEAM_BYTES``) runs in every worker's heartbeat
(``worker/presence.py``), in the distributed farm and in the embedded server alike; deleting the
same job twice is harmless (the second finds no row). The team cap counts only finished jobs'
artifacts (a team's running jobs never cost it a finished one) and deletes no job that finished
less than ``min_age_s`` ago (``RETENTION_MIN_AGE_S``, an hour by default)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from persistence.config import ServiceSettings
from persistence.db import Database
from persistence.layout import DataLayout
from persistence.models import Job, utcnow
from persistence.repositories import ArtifactRepository
from persistence.repositories.audit import JOB_DELETED, RETENTION_ACTOR, AuditRepository
from persistence.repositories.farm_verdicts import FarmVerdictRepository
from persistence.repositories.retention import RetentionRepository
from persistence.store import ArtifactStore

GRACE_MARGIN_S = 3600.0  # beyond the job time limit: a check's model is unreferenced until its verdict
RETENTION_MIN_AGE_S = 3600.0  # the team cap deletes no job that finished more recently
AGE_BATCH = 200
DEFAULT_JOB_TIME_LIMIT_S = float(ServiceSettings.model_fields["job_time_limit_s"].default)


def blob_grace_s(job_time_limit_s: float, sweep_age_s: float | None = None) -> float:
    """How long a stored blob that no artifact row refers to is kept since it was last stored
    (``BLOB_SWEEP_AGE_S``, else the job time limit plus an hour: longer than any check runs)."""
    return sweep_age_s if sweep_age_s is not None else job_time_limit_s + GRACE_MARGIN_S


@dataclass(frozen=True)
class DeletedJob:
    job_id: str
    blobs_removed: int


def delete_finished_job(
    db: Database, layout: DataLayout, job_id: str, blob_grace: float, actor: str = RETENTION_ACTOR
) -> DeletedJob | None:
    """Delete a finished job, its farm verdicts and the blobs nothing refers to any more (none
    stored within ``blob_grace`` seconds); None when it is gone or not finished. The team's audit
    record says ``actor`` deleted it (a token's prefix, or the retention rules)."""
    with db.session() as session:
        retention = RetentionRepository(session)
        if not retention.lock_finished(job_id):
            return None
        _audit_deletion(session, job_id, actor)
        keys = retention.blob_keys_of(job_id)
        FarmVerdictRepository(session).forget_job(job_id)
        retention.delete_finished(job_id)
    shutil.rmtree(layout.job_dir(job_id), ignore_errors=True)
    return DeletedJob(job_id, _remove_unreferenced(db, layout.store, keys, blob_grace))


def _audit_deletion(session: Session, job_id: str, actor: str) -> None:
    job = session.get(Job, job_id)
    if job is not None:
        detail = {"model": job.model_filename, "status": str(job.status), "created_at": job.created_at.isoformat()}
        AuditRepository(session).add(job.team_id, JOB_DELETED, actor, job_id, detail)


def _remove_unreferenced(db: Database, store: ArtifactStore, keys: Iterable[str], blob_grace: float) -> int:
    keys = list(keys)
    with db.session() as session:
        referenced = ArtifactRepository(session).referenced(keys)
    return sum(
        1
        for key in keys
        if key not in referenced and store.delete_if_stored_before(key, blob_grace, still_unreferenced(db, key))
    )


def still_unreferenced(db: Database, key: str) -> Callable[[], bool]:
    """The question a store asks again while it deletes ``key`` (``delete_if_stored_before``): does
    no artifact row refer to it yet? A row committed since the first look puts the blob back."""

    def ask() -> bool:
        with db.session() as session:
            return not ArtifactRepository(session).referenced([key])

    return ask


def enforce_retention(
    db: Database,
    layout: DataLayout,
    max_age_s: float,
    max_team_bytes: int,
    *,
    blob_grace: float | None = None,
    min_age_s: float = RETENTION_MIN_AGE_S,
) -> list[DeletedJob]:
    """Delete the finished jobs older than ``max_age_s`` (since they finished), then, per team whose
    finished jobs' artifacts exceed ``max_team_bytes``, its oldest finished jobs (those finished at
    least ``min_age_s`` ago) until it fits. 0: no limit. Farm verdicts whose job is gone (kept by
    an older version without their job) are pruned. ``blob_grace``: ``blob_grace_s()`` of the
    default job time limit unless given."""
    grace = blob_grace if blob_grace is not None else blob_grace_s(DEFAULT_JOB_TIME_LIMIT_S)
    victims: list[str] = []
    with db.session() as session:
        retention = RetentionRepository(session)
        FarmVerdictRepository(session).prune_orphans()
        if max_age_s > 0:
            victims += retention.finished_before(utcnow() - timedelta(seconds=max_age_s), AGE_BATCH)
        if max_team_bytes > 0:
            old_enough = utcnow() - timedelta(seconds=min_age_s)
            for team_id, team_total in sorted(retention.team_bytes().items()):
                remaining = team_total
                for job_id, size in retention.finished_oldest_first(team_id, old_enough):
                    if remaining <= max_team_bytes:
                        break
                    if job_id not in victims:
                        victims.append(job_id)
                    remaining -= size
    deleted = [delete_finished_job(db, layout, job_id, grace) for job_id in victims]
    return [job for job in deleted if job is not None]

"""Where things live under DATA_DIR: the artifact store, each job's unpacked model and work folder."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from persistence.s3store import S3ArtifactStore, S3Config
from persistence.store import ArtifactStore


@dataclass(frozen=True)
class DataLayout:
    root: Path
    s3: S3Config | None = None  # artifacts in an S3-compatible bucket, cached under root/artifacts

    @cached_property
    def store(self) -> ArtifactStore:
        if self.s3 is not None:
            return S3ArtifactStore(self.root / "artifacts", self.s3)
        return ArtifactStore(self.root / "artifacts")

    def job_dir(self, job_id: str) -> Path:
        if not job_id.isalnum():
            raise ValueError(f"bad job id {job_id!r}")
        return self.root / "jobs" / job_id

    def model_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "model"

    def work_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "work"

    def staging_dir(self) -> Path:
        path = self.root / "staging"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def sweep_staging(self, max_age_s: float) -> list[str]:
        """Remove upload staging folders nothing has written to for ``max_age_s`` (an api killed
        mid-upload leaves its folder behind). Younger ones may be another api's upload in
        progress and stay. Stored artifacts never live here. Returns the removed folders' names."""
        removed: list[str] = []
        cutoff = time.time() - max_age_s
        for folder in self.staging_dir().iterdir():
            if folder.is_dir() and not folder.is_symlink() and _last_write(folder) < cutoff:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder.name)
        return removed


def _last_write(folder: Path) -> float:
    """The newest modification time of ``folder`` and everything in it."""
    newest = folder.lstat().st_mtime
    for path in folder.rglob("*"):
        try:
            newest = max(newest, path.lstat().st_mtime)
        except OSError:
            continue
    return newest

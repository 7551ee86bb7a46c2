"""Where things live under DATA_DIR: the artifact store, each job's unpacked model and work folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from persistence.store import ArtifactStore


@dataclass(frozen=True)
class DataLayout:
    root: Path

    @property
    def store(self) -> ArtifactStore:
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

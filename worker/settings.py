"""Worker settings from the environment (built by ``load_worker_settings``, never at import time)."""

from __future__ import annotations

from pathlib import Path

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from persistence.config import refuse_placeholder_secret


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore")

    database_url: str = "sqlite:///data/onnx-reducer.db"
    redis_url: str | None = None
    data_dir: Path = Path("data")
    job_time_limit_s: float = 6 * 3600.0
    job_lease_s: float = 60.0
    max_attempts: int = 3
    allow_command_checks: bool = False
    worker_queues: str = "cpu"

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return refuse_placeholder_secret(value, "DATABASE_URL") or value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        return refuse_placeholder_secret(value, "REDIS_URL")

    @property
    def visibility_timeout_s(self) -> int:
        """Above the job time limit, so Redis never redelivers a job that is still running."""
        return int(self.job_time_limit_s + 3600)


def load_worker_settings() -> WorkerSettings:
    return WorkerSettings()

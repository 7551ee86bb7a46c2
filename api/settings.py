"""Api settings from the environment (built by ``load_api_settings``, never at import time)."""

from __future__ import annotations

from pathlib import Path

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from persistence.config import refuse_placeholder_secret


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore")

    database_url: str = "sqlite:///data/onnx-reducer.db"
    redis_url: str | None = None
    data_dir: Path = Path("data")
    max_upload_bytes: int = 2 * 1024**3
    max_field_bytes: int = 256 * 1024
    max_extracted_bytes: int = 8 * 1024**3
    declared_bytes_floor: int = 1024**3
    declared_bytes_factor: int = 16
    allow_command_checks: bool = False
    sse_heartbeat_s: float = 15.0
    sse_poll_s: float = 0.5
    sse_max_lifetime_s: float = 3600.0

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return refuse_placeholder_secret(value, "DATABASE_URL") or value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        return refuse_placeholder_secret(value or None, "REDIS_URL")


def load_api_settings() -> ApiSettings:
    return ApiSettings()

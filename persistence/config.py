"""What the settings classes of every deployable (api, worker) share: where the database, the
broker and the data folder are, whether command checks may run and how much memory a check may
use, and refusing placeholder secrets.
Each deployable subclasses ``ServiceSettings``; both are built in factories, never at import."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_SECRETS = frozenset({"changeme", "change-me", "changethis", "secret", "password", "placeholder", "xxx"})


def refuse_placeholder_secret(url: str | None, variable: str) -> str | None:
    """Reject a URL whose password is a well-known placeholder (copied from an example file)."""
    if url is None:
        return None
    password = urlsplit(url).password
    if password is not None and password.lower() in PLACEHOLDER_SECRETS:
        raise ValueError(f"{variable} uses the placeholder password '{password}'; set a real secret.")
    return url


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore")

    database_url: str = "sqlite:///data/onnx-reducer.db"
    redis_url: str | None = None
    data_dir: Path = Path("data")
    allow_command_checks: bool = False
    # Resident memory of one check run (all its processes): the default when a spec gives no
    # memory_limit, and the most a spec may ask for. 0: no limit.
    check_memory_limit_bytes: int = Field(default=8 * 2**30, ge=0)
    # a worker without a heartbeat for this long is offline; after the second, its row is dropped
    worker_offline_after_s: float = Field(default=60.0, gt=0)
    worker_forget_after_s: float = Field(default=24 * 3600.0, gt=0)

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return refuse_placeholder_secret(value, "DATABASE_URL") or value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        return refuse_placeholder_secret(value or None, "REDIS_URL")

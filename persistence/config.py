"""What the settings classes of every deployable (api, worker) share: where the database, the
broker and the data folder are, whether command checks may run and how much memory a check may
use, and refusing placeholder secrets.
Each deployable subclasses ``ServiceSettings``; both are built in factories, never at import.

The embedded default keeps its SQLite file and artifacts in one home folder, the same from any
working directory: ``ONNX_REDUCER_HOME``, else ``$XDG_DATA_HOME/onnx-reducer``, else
``~/.local/share/onnx-reducer``. ``DATABASE_URL`` and ``DATA_DIR`` override its parts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from persistence.fairshare import parse_shares
from persistence.s3store import S3Config
from persistence.webhooks import parse_networks

PLACEHOLDER_SECRETS = frozenset({"changeme", "change-me", "changethis", "secret", "password", "placeholder", "xxx"})


def refuse_placeholder_secret(url: str | None, variable: str) -> str | None:
    """Reject a URL whose password is a well-known placeholder (copied from an example file)."""
    if url is None:
        return None
    password = urlsplit(url).password
    if password is not None and password.lower() in PLACEHOLDER_SECRETS:
        raise ValueError(f"{variable} uses the placeholder password '{password}'; set a real secret.")
    return url


def default_home() -> Path:
    """Where the embedded default lives when ``ONNX_REDUCER_HOME`` is not set."""
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "onnx-reducer"


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore")

    onnx_reducer_home: Path = Field(default_factory=default_home)
    database_url: str = ""  # default: SQLite in the home folder
    redis_url: str | None = None
    data_dir: Path = Path()  # default: the home folder
    allow_command_checks: bool = False
    # Resident memory of one check run (all its processes): the default when a spec gives no
    # memory_limit, and the most a spec may ask for. 0: no limit.
    check_memory_limit_bytes: int = Field(default=8 * 2**30, ge=0)
    # A job running longer than this since its first start fails (worker); the api refuses check
    # specs whose timeout x repeat exceeds it.
    job_time_limit_s: float = 6 * 3600.0
    # serve/worker start-up: how long to wait for an unreachable database before giving up
    database_wait_s: float = 60.0
    # a worker without a heartbeat for this long is offline; after the second, its row is dropped
    worker_offline_after_s: float = Field(default=60.0, gt=0)
    worker_forget_after_s: float = Field(default=24 * 3600.0, gt=0)
    # A job's checks are spread over the idle workers of its queue, at most this many at once.
    max_workers_per_job: int = Field(default=8, ge=1)
    # The most checks one team may run at once over the farm (0: no cap).
    team_max_running_checks: int = Field(default=0, ge=0)
    # Fair-share weights, "team-a=2,team-b=1" (teams not named weigh 1).
    team_shares: str = ""
    # Embedded mode: how many checks run at once (local worker slots).
    local_workers: int = Field(default=2, ge=1)
    # Where artifacts live: "local" (DATA_DIR/artifacts, a shared volume in a farm) or "s3" (an
    # S3-compatible bucket; DATA_DIR/artifacts is then this machine's cache of it).
    artifact_store: Literal["local", "s3"] = "local"
    s3_endpoint_url: str | None = None  # MinIO/Ceph: http://minio:9000; empty: AWS
    s3_public_endpoint_url: str | None = None  # the address clients use for presigned downloads
    s3_bucket: str = ""
    s3_region: str = "us-east-1"
    aws_access_key_id: SecretStr | None = None  # unset: boto3's own chain (instance role, ~/.aws)
    aws_secret_access_key: SecretStr | None = None
    # downloads redirect to a short-lived presigned URL (clients must reach the store; the web page
    # needs the bucket to allow its origin: CORS); off: the api streams them
    s3_presigned_downloads: bool = False
    s3_presign_expiry_s: int = Field(default=300, ge=1, le=7 * 24 * 3600)
    s3_multipart_threshold_bytes: int = Field(default=64 * 2**20, ge=5 * 2**20)
    s3_multipart_chunk_bytes: int = Field(default=16 * 2**20, ge=5 * 2**20)
    s3_create_bucket: bool = True
    # A worker waits this long for an unreachable store (a connection refused or cut, a 5xx: a
    # MinIO restarting) before it leaves the job to be taken again; the api never waits: a 503.
    s3_outage_wait_s: float = Field(default=120.0, ge=0)
    # Webhooks (persistence/webhooks.py): a target that resolves to a loopback, private,
    # link-local or metadata address is refused, at registration and before every delivery, unless
    # the operator allows private targets altogether or names the networks allowed (comma-separated
    # addresses or CIDR blocks, e.g. "10.20.0.0/16,192.168.1.5")
    webhook_allow_private: bool = False
    webhook_allowed_networks: str = ""

    def s3_config(self, wait_out_outages: bool = True) -> S3Config | None:
        """The object store's settings when ``ARTIFACT_STORE=s3``; None for the local folder.
        ``wait_out_outages``: False for the api (it answers 503 at once)."""
        if self.artifact_store != "s3":
            return None
        return S3Config(
            bucket=self.s3_bucket,
            endpoint_url=self.s3_endpoint_url or None,
            public_endpoint_url=self.s3_public_endpoint_url or None,
            region=self.s3_region,
            access_key_id=self.aws_access_key_id.get_secret_value() if self.aws_access_key_id else None,
            secret_access_key=self.aws_secret_access_key.get_secret_value() if self.aws_secret_access_key else None,
            presigned_downloads=self.s3_presigned_downloads,
            presign_expiry_s=self.s3_presign_expiry_s,
            multipart_threshold=self.s3_multipart_threshold_bytes,
            multipart_chunksize=self.s3_multipart_chunk_bytes,
            create_bucket=self.s3_create_bucket,
            outage_wait_s=self.s3_outage_wait_s if wait_out_outages else 0.0,
        )

    @model_validator(mode="after")
    def _s3_bucket(self) -> Self:
        if self.artifact_store == "s3" and not self.s3_bucket:
            raise ValueError("ARTIFACT_STORE=s3 needs S3_BUCKET (and S3_ENDPOINT_URL for MinIO/Ceph).")
        return self

    @field_validator("webhook_allowed_networks")
    @classmethod
    def _webhook_allowed_networks(cls, value: str) -> str:
        parse_networks(value)
        return value

    @field_validator("team_shares")
    @classmethod
    def _team_shares(cls, value: str) -> str:
        parse_shares(value)
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return refuse_placeholder_secret(value, "DATABASE_URL") or value

    @model_validator(mode="after")
    def _home_defaults(self) -> Self:
        home = self.onnx_reducer_home.expanduser().absolute()
        self.onnx_reducer_home = home
        if not self.database_url:
            self.database_url = f"sqlite:///{home / 'onnx-reducer.db'}"
        if "data_dir" not in self.model_fields_set:
            self.data_dir = home
        return self

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        return refuse_placeholder_secret(value or None, "REDIS_URL")

"""Api settings from the environment (built by ``load_api_settings``, never at import time)."""

from __future__ import annotations

from pydantic import Field

from persistence.config import ServiceSettings


class ApiSettings(ServiceSettings):
    max_upload_bytes: int = 2 * 1024**3
    max_field_bytes: int = 256 * 1024
    max_extracted_bytes: int = 8 * 1024**3
    declared_bytes_floor: int = 1024**3
    declared_bytes_factor: int = 16
    max_model_nodes: int = 500_000
    max_bundle_members: int = 10_000
    # Uploads are inspected (spec, bundle, model) in this many worker processes; at most
    # intake_max_pending wait or run, beyond that POST /v1/jobs answers 503 + Retry-After.
    intake_workers: int = 2
    intake_max_pending: int = 8
    retry_after_s: int = 5
    # Short requests handled at once; more answer 503 + Retry-After (0: no limit). Event streams
    # and uploads are not counted.
    max_inflight_requests: int = 32
    worker_threads: int = 8  # threads for database work and blocking routes (at most the connection pool)
    # Staging folders of uploads older than this (an api killed mid-upload) are removed at start.
    staging_max_age_s: float = 3600.0
    sse_heartbeat_s: float = 15.0
    sse_poll_s: float = 0.5
    sse_max_lifetime_s: float = 3600.0
    sse_token_check_s: float = 5.0  # how often an open event stream re-checks its token (revocation)
    token_cache_s: float = 2.0  # a token's team is looked up at most this often per token (revocation delay)
    # GET /v1/jobs/{id} answers from a body at most this old (the api's own cancel/retry/verdict and
    # the status events its streams send drop it at once); pollers then cost no query each
    job_read_cache_s: float = Field(default=0.5, ge=0, le=5)
    # /metrics: a scrape sending "Authorization: Bearer METRICS_TOKEN" sees the per-team series;
    # without a token the view is team-neutral (team labels summed away); a wrong token is 401
    metrics_token: str | None = Field(default=None, repr=False)


def load_api_settings() -> ApiSettings:
    return ApiSettings()

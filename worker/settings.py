"""Worker settings from the environment (built by ``load_worker_settings``, never at import time)."""

from __future__ import annotations

from pydantic import Field

from persistence.config import ServiceSettings


class WorkerSettings(ServiceSettings):
    job_lease_s: float = 60.0
    max_attempts: int = 3
    worker_queues: str = "cpu"
    # how often a worker refreshes its row, queues again the checks of dead workers and kills orphaned checks
    worker_heartbeat_s: float = Field(default=10.0, gt=0)
    # how often an idle worker looks in the database for work (the database is the queue; a message
    # only wakes a worker at once, so a lost one costs at most this long)
    worker_poll_s: float = Field(default=5.0, gt=0)
    # GPU models this worker advertises, comma-separated ("none": no GPU); unset: detected
    worker_gpus: str | None = None
    # other onnxruntime releases this worker runs checks on: VERSION=PYTHON of an environment holding
    # each, comma-separated ("1.20=/opt/ort-1.20/bin/python,1.21=..."; docs/deployment.md); empty: none
    runtime_envs: str = ""
    blob_sweep_interval_s: float = Field(default=3600.0, gt=0)
    # unset: JOB_TIME_LIMIT_S + 1 h (a running check's model is unreferenced until its verdict)
    blob_sweep_age_s: float | None = Field(default=None, ge=0)
    # retention (persistence/retention.py), enforced every RETENTION_INTERVAL_S by each worker's
    # heartbeat: finished jobs older than this are deleted (0: kept forever) ...
    retention_max_age_s: float = Field(default=0.0, ge=0)
    # ... and a team whose finished jobs' artifacts exceed this loses its oldest finished jobs (0: no cap)
    retention_max_team_bytes: int = Field(default=0, ge=0)
    # ... but never a job that finished less than this long ago
    retention_min_age_s: float = Field(default=3600.0, ge=0)
    retention_interval_s: float = Field(default=600.0, gt=0)
    # the farm verdict cache: a job answers the candidates another job of its team already checked
    # (same model, check and runtime) without a check, and shares its own verdicts
    farm_verdict_cache: bool = True
    # ...and reads the verdicts of every team, not only its own (a verdict tells about a model)
    share_verdicts_across_teams: bool = False
    # how much a worker lowers its own CPU priority (and so its checks'): an api or a database on
    # the same machine keeps answering while checks run (0..19; 0 keeps the priority it started with)
    worker_nice: int = Field(default=10, ge=0, le=19)
    # webhooks (worker/webhooks.py): each worker looks for due deliveries this often ...
    webhook_poll_s: float = Field(default=2.0, gt=0)
    # ... waits this long for a receiver's answer ...
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=120)
    # ... retries a failed one after WEBHOOK_BACKOFF_S, doubling each time (at most 2 h apart) ...
    webhook_backoff_s: float = Field(default=5.0, gt=0)
    # ... and gives up once the event is this old (a day)
    webhook_max_age_s: float = Field(default=24 * 3600.0, gt=0)
    # ... and its delivery log forgets the deliveries that ended this long ago (30 days)
    webhook_log_keep_s: float = Field(default=30 * 24 * 3600.0, gt=0)
    # the service's public address (https://reducer.example.com): a webhook's links start with it
    # (empty: they are paths on the api's address)
    public_url: str = ""

    @property
    def blob_sweep_min_age_s(self) -> float:
        return self.blob_sweep_age_s if self.blob_sweep_age_s is not None else self.job_time_limit_s + 3600


def load_worker_settings() -> WorkerSettings:
    return WorkerSettings()

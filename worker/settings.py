"""Worker settings from the environment (built by ``load_worker_settings``, never at import time)."""

from __future__ import annotations

from persistence.config import ServiceSettings


class WorkerSettings(ServiceSettings):
    job_lease_s: float = 60.0
    max_attempts: int = 3
    worker_queues: str = "cpu"

    @property
    def visibility_timeout_s(self) -> int:
        """Above the job time limit, so Redis never redelivers a job that is still running."""
        return int(self.job_time_limit_s + 3600)


def load_worker_settings() -> WorkerSettings:
    return WorkerSettings()

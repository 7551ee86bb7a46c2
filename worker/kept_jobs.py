"""The prepared jobs a context keeps (``RunnerContext.prepared``), least recently used dropped
first, per thread: the embedded runner's slots may be threads sharing one context, and they never
share a workspace or an iteration file. Only the keeping is here; preparing a job and finding it
kept is ``worker.prepared.prepared_job``."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

KEEP_JOBS = 3


class KeptJob(Protocol):
    """A prepared job as the keeping sees it (``worker.prepared.PreparedJob``)."""

    @property
    def work_dir(self) -> Path:
        """Its folder: a job whose folder went (swept, deleted) is prepared again."""
        ...

    def close(self) -> None:
        """Frees its workspace and removes its folder."""
        ...


class KeptJobs:
    """One thread's prepared jobs, the last ``keep`` used."""

    def __init__(self, keep: int = KEEP_JOBS) -> None:
        self.keep = keep
        self._jobs: OrderedDict[str, KeptJob] = OrderedDict()

    def find(self, job_id: str) -> KeptJob | None:
        """The job kept (now the most recently used) while its folder is there; else None, and
        one whose folder went is dropped."""
        kept = self._jobs.get(job_id)
        if kept is not None and kept.work_dir.is_dir():
            self._jobs.move_to_end(job_id)
            return kept
        self.drop(job_id)
        return None

    def add(self, job_id: str, job: KeptJob) -> None:
        """Keep ``job``; the least recently used beyond ``keep`` are closed."""
        self._jobs[job_id] = job
        while len(self._jobs) > self.keep:
            _, oldest = self._jobs.popitem(last=False)
            oldest.close()

    def drop(self, job_id: str) -> None:
        kept = self._jobs.pop(job_id, None)
        if kept is not None:
            kept.close()


class PerThreadJobs(threading.local):
    """Each thread that runs checks with this context keeps its own prepared jobs."""

    def __init__(self) -> None:
        self.jobs = KeptJobs()

    def find(self, job_id: str) -> KeptJob | None:
        return self.jobs.find(job_id)

    def add(self, job_id: str, job: KeptJob) -> None:
        self.jobs.add(job_id, job)

    def drop(self, job_id: str) -> None:
        self.jobs.drop(job_id)

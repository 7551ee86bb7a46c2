"""A job's labels (``job_labels``): written once, with the job; read for a page of jobs in one
query; a label filter of the jobs list is one ``EXISTS`` per label."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import ColumnElement, exists, select
from sqlalchemy.orm import Session

from persistence.models import Job, JobLabel


def has_label(key: str, value: str) -> ColumnElement[bool]:
    """A ``WHERE`` clause of a query on ``Job``: the job carries ``key=value``."""
    return exists().where(JobLabel.job_id == Job.id, JobLabel.key == key, JobLabel.value == value)


class LabelRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, job_id: str, labels: Mapping[str, str]) -> None:
        self.session.add_all(JobLabel(job_id=job_id, key=key, value=value) for key, value in labels.items())

    def for_jobs(self, job_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """Every job's labels (a job without any is absent), keys in alphabetical order."""
        if not job_ids:
            return {}
        rows = self.session.execute(
            select(JobLabel.job_id, JobLabel.key, JobLabel.value)
            .where(JobLabel.job_id.in_(list(job_ids)))
            .order_by(JobLabel.job_id, JobLabel.key)
        ).all()
        labels: dict[str, dict[str, str]] = {}
        for job_id, key, value in rows:
            labels.setdefault(job_id, {})[key] = value
        return labels

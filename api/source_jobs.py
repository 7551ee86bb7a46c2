"""A bisection job started from a finished reduce job (issue 28): the upload's ``source_job_id``
(tasks ``bisect-passes`` and ``bisect-releases``) and ``on`` (``min-bad``, the default with a
source, or ``original``: the model the bisection runs), stored in the job's options for the worker
(``worker.source_job``). The source must be a succeeded reduce job of the uploading team with a
min-bad: a job of another team is not found (404), as for every job route."""

from __future__ import annotations

import re

from sqlalchemy.orm import Session

from api.problems import ProblemError, field_errors, not_found
from persistence.enums import ArtifactKind, JobStatus, JobTask
from persistence.repositories import ArtifactRepository, JobRepository

SOURCE_TASKS = (JobTask.BISECT_PASSES.value, JobTask.BISECT_RELEASES.value)
ON_VALUES = ("min-bad", "original")
SOURCE_FIELDS = ("source_job_id", "on")  # the upload's fields, stored in the job's options as they are
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def source_options(fields: dict[str, str], task: str) -> dict[str, str]:
    """The options entries of the ``source_job_id`` and ``on`` fields (none when both are left
    out); 422 for a malformed id, an ``on`` without a source or of another task."""
    source = fields.get("source_job_id", "").strip()
    on = fields.get("on", "").strip()
    if not source:
        if on:
            _invalid("on", "on needs source_job_id: the reduce job whose min-bad or original to bisect.")
        return {}
    if task not in SOURCE_TASKS:
        _invalid("source_job_id", f"source_job_id applies to tasks {' and '.join(SOURCE_TASKS)}, not {task}.")
    if _JOB_ID.fullmatch(source) is None:
        _invalid("source_job_id", "source_job_id must be a job id (letters, digits, '-' and '_').")
    on = on or ON_VALUES[0]
    if on not in ON_VALUES:
        _invalid("on", f"on must be one of {', '.join(ON_VALUES)}, not '{on[:50]}'.")
    return {"source_job_id": source, "on": on}


def check_source(session: Session, team_id: str, source: dict[str, str]) -> None:
    """The source job of ``source`` (``source_options``) is the team's, a reduce job that
    succeeded with a min-bad: 404 when the team has no such job, else 422 saying what it lacks."""
    source_id = source.get("source_job_id")
    if not source_id:
        return
    job = JobRepository(session).for_team(team_id, source_id)
    if job is None:
        raise not_found(f"Job '{source_id}' (source_job_id)")
    if JobTask.of(job.options) is not JobTask.REDUCE:
        _invalid("source_job_id", f"source job '{source_id}' is a {JobTask.of(job.options)} job, not a reduce job.")
    if job.status != JobStatus.SUCCEEDED:
        _invalid("source_job_id", f"source job '{source_id}' is {job.status}; start from a reduce job that succeeded.")
    if ArtifactRepository(session).get(job.id, ArtifactKind.MIN_BAD, ArtifactKind.MIN_BAD.value) is None:
        _invalid("source_job_id", f"source job '{source_id}' has no min-bad.")


def _invalid(name: str, detail: str) -> None:
    raise ProblemError(422, "Invalid option", detail, errors=field_errors(name, detail))

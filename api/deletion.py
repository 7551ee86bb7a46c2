"""``DELETE /v1/jobs/{id}``: the job is cancelled first (a running one stops within seconds), then
deleted with its farm verdicts and the blobs nothing refers to any more (``persistence.retention``:
a blob another job of any team stored, even one not recorded yet, stays)."""

from __future__ import annotations

import time

import anyio
from sqlalchemy.orm import Session

from api.problems import ProblemError, not_found
from api.services import Services
from jobflow.ending import cancel
from persistence.contracts import QUEUE_INTERACTIVE
from persistence.repositories import JobRepository
from persistence.retention import blob_grace_s, delete_finished_job
from persistence.retry import transaction

STOP_WAIT_S = 15.0  # how long DELETE waits for a running job to stop before answering 409
POLL_S = 0.25


def _cancel(services: Services, team_id: str, job_id: str) -> int | None:
    """Cancel the team's job (404 for another team's or a missing one); the event seq to announce.
    The job's row is locked first (``cancel``: the lock order of ``persistence.retry``), and the
    transaction runs again in place when PostgreSQL aborts it as a conflict."""

    def work(session: Session) -> int | None:
        job = JobRepository(session).for_team(team_id, job_id)
        if job is None:
            raise not_found(f"Job '{job_id}'")
        return cancel(session, job, at_once=job.queue == QUEUE_INTERACTIVE)

    return transaction(services.db, work, f"the cancel before deleting job {job_id}")


def _still_there(services: Services, team_id: str, job_id: str) -> bool:
    with services.db.session() as session:
        return JobRepository(session).for_team(team_id, job_id) is not None


async def delete_job(services: Services, team_id: str, job_id: str, actor: str) -> None:
    """``actor``: who asks (the team's audit record names it)."""
    seq = await anyio.to_thread.run_sync(_cancel, services, team_id, job_id)
    services.job_reads.forget(team_id, job_id)
    if seq is not None:
        services.notify(job_id, seq)
    deadline = time.monotonic() + STOP_WAIT_S
    grace = blob_grace_s(services.settings.job_time_limit_s)
    while True:
        deleted = await anyio.to_thread.run_sync(
            delete_finished_job, services.db, services.layout, job_id, grace, actor
        )
        if deleted is not None or not await anyio.to_thread.run_sync(_still_there, services, team_id, job_id):
            services.job_reads.forget(team_id, job_id)
            return
        if time.monotonic() >= deadline:
            raise ProblemError(
                409,
                "Job still stopping",
                f"Job '{job_id}' was cancelled but has not stopped yet; send the DELETE again in a few seconds.",
                headers={"Retry-After": "5"},
            )
        await anyio.sleep(POLL_S)

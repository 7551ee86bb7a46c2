"""What a worker does with a job handed to it (a Celery message, or the embedded runner's queue):
run it when this worker can serve it, log one line when it starts and one when it ends, and keep
the worker's ``Activity`` up to date for its heartbeat.

A job whose ``requires`` this worker does not meet is not run: it is parked (no message on its
way), so the next idle worker that meets it takes it (``worker/presence.py``), and
``GET /v1/jobs/{id}`` says what no worker offers."""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from checks.capabilities import unmet
from checks.requirements import Requirements
from checks.spec import requirements_of
from persistence.enums import JobStatus
from persistence.jsonlog import bind_job
from persistence.repositories import ClaimResult, JobRepository, TeamRepository, claimable
from persistence.retry import MAX_TRIES, is_conflict, sqlstate_of
from worker.context import RunnerContext
from worker.presence import Activity, WorkerIdentity
from worker.run_job import run_job

log = logging.getLogger("onnx_reducer.worker")


class Delivery(enum.StrEnum):
    RAN = "ran"  # this worker claimed the job and ran an attempt
    ENDED = "ended"  # nothing left to do (finished, or ended by the claim: cancelled, out of attempts)
    HELD = "held"  # another worker holds it; if that worker dies, the job's lease runs out and it is taken again
    DECLINED = "declined"  # this worker does not meet the job's requires: left for one that does
    NO_DATABASE = "no-database"  # the database could not be reached: the job is taken again later


@dataclass(frozen=True)
class _Sighting:
    team: str
    queue: str
    attempt: int
    claimable: bool
    ended: bool
    requirements: Requirements


_DELIVERY = {ClaimResult.CLAIMED: Delivery.RAN, ClaimResult.BUSY: Delivery.HELD, ClaimResult.FINISHED: Delivery.ENDED}


class JobHandler:
    def __init__(self, ctx: RunnerContext, identity: WorkerIdentity, activity: Activity) -> None:
        self.ctx, self.identity, self.activity = ctx, identity, activity
        self.run_job: Callable[[str, RunnerContext], ClaimResult] = run_job  # the embedded server runs it in a child

    def handle(self, job_id: str) -> Delivery:
        with bind_job(job_id):
            try:
                return self._handle(job_id)
            except SQLAlchemyError as exc:
                state = sqlstate_of(exc)
                if is_conflict(exc):
                    log.warning(
                        "job %s: PostgreSQL kept aborting a transaction as it crossed other workers' "
                        "(%s, SQLSTATE %s, after %d tries); the work is taken again later",
                        *(job_id, type(exc).__name__, state, MAX_TRIES),
                    )
                else:
                    log.warning(
                        "job %s: the database is unreachable (%s%s: %s); the job is taken again once it is back",
                        *(job_id, type(exc).__name__, f", SQLSTATE {state}" if state else "", _first_line(exc)),
                    )
                return Delivery.NO_DATABASE

    def _handle(self, job_id: str) -> Delivery:
        seen = self._look(job_id)
        if seen is None:
            return Delivery.ENDED
        missing = unmet(seen.requirements, self.identity.capabilities)
        if missing and not seen.ended:
            self._park(job_id, missing)
            return Delivery.DECLINED
        if seen.claimable:
            log.info(
                "job %s started: team %s, queue %s, attempt %d, worker %s",
                *(job_id, seen.team, seen.queue, seen.attempt + 1, self.identity.name),
            )
        started = time.monotonic()
        self.activity.begin(job_id)
        try:
            claim = self.run_job(job_id, self.ctx)
        finally:
            self.activity.end()
        if claim is ClaimResult.CLAIMED:
            self._log_end(job_id, seen.team, time.monotonic() - started)
        elif claim is ClaimResult.BUSY:
            log.info("job %s is held by another worker; this message is dropped", job_id)
        return _DELIVERY[claim]

    def _look(self, job_id: str) -> _Sighting | None:
        with self.ctx.db.session() as session:
            job = JobRepository(session).get(job_id)
            if job is None:
                return None
            return _Sighting(
                team=TeamRepository(session).name_of(job.team_id),
                queue=job.queue,
                attempt=job.attempts,
                claimable=claimable(job, self.ctx.max_attempts),
                ended=JobStatus(job.status).terminal,
                requirements=requirements_of(job.check_spec),
            )

    def _park(self, job_id: str, missing: list[str]) -> None:
        with self.ctx.db.session() as session:
            JobRepository(session).park(job_id)
        log.info(
            "job %s needs %s, which this worker (%s) does not offer; it is left for a worker that does",
            *(job_id, ", ".join(missing), self.identity.name),
        )

    def _log_end(self, job_id: str, team: str, seconds: float) -> None:
        with self.ctx.db.session() as session:
            job = JobRepository(session).get(job_id)
            if job is None:
                return
            status, code, checks, hits = job.status, job.error_code, job.checks_run, job.cache_hits
        if status == JobStatus.RUNNING.value:
            outcome = "stopped (another worker took the job over)"
        else:
            outcome = status + (f" ({code})" if code else "")
        log.info(
            "job %s ended: %s, team %s, %.1f s, %d checks, %d cache hits",
            *(job_id, outcome, team, seconds, checks, hits),
        )


def _first_line(exc: SQLAlchemyError) -> str:
    """The driver's message, first line (no SQL, no parameters)."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0][:200] if lines else ""

"""What a worker does when woken (a Celery message, its own poll, or the embedded runner's queue):
``run_job`` (take work from the database until none is left that it may take), with the worker's
``Activity`` kept up to date for its heartbeat, and a database that cannot be reached logged in one
line: the work stays in the database, where this worker or another finds it once it is back
(``worker.poll``)."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from persistence.jsonlog import bind_job
from persistence.repositories import ClaimResult
from persistence.retry import MAX_TRIES, is_conflict, is_unreachable, sqlstate_of
from worker.context import RunnerContext
from worker.presence import Activity
from worker.run_job import run_job

log = logging.getLogger("onnx_reducer.worker")


class Delivery(enum.StrEnum):
    RAN = "ran"  # this worker took some work
    ENDED = "ended"  # the job it was woken for has ended, and nothing else was left to take
    HELD = "held"  # nothing to take: other workers are at the job it was woken for
    NO_DATABASE = "no-database"  # the database could not be reached: the work is taken once it is back


_DELIVERY = {ClaimResult.CLAIMED: Delivery.RAN, ClaimResult.BUSY: Delivery.HELD, ClaimResult.FINISHED: Delivery.ENDED}


class JobHandler:
    def __init__(self, ctx: RunnerContext, activity: Activity) -> None:
        self.ctx, self.activity = ctx, activity
        self.run_job: Callable[[str, RunnerContext], ClaimResult] = run_job  # the embedded server runs it in a child

    def handle(self, job_id: str) -> Delivery:
        """Take work, starting from the wake-up for ``job_id`` (work of any job may be taken)."""
        with bind_job(job_id):
            self.activity.begin(job_id)
            delivery = Delivery.NO_DATABASE
            try:
                delivery = _DELIVERY[self.run_job(job_id, self.ctx)]
                return delivery
            except SQLAlchemyError as exc:
                state = sqlstate_of(exc)
                if is_conflict(exc):
                    log.warning(
                        "job %s: PostgreSQL kept aborting a transaction as it crossed other workers' "
                        "(%s, SQLSTATE %s, after %d tries); the work is taken again later",
                        *(job_id, type(exc).__name__, state, MAX_TRIES),
                    )
                elif is_unreachable(exc):
                    log.warning(
                        "job %s: the database is unreachable (%s%s: %s); the work is taken once it is back",
                        *(job_id, type(exc).__name__, f", SQLSTATE {state}" if state else "", _first_line(exc)),
                    )
                else:
                    log.error(
                        "job %s: the database refused a statement (%s%s: %s); the work is taken again later",
                        *(job_id, type(exc).__name__, f", SQLSTATE {state}" if state else "", _first_line(exc)),
                    )
                return Delivery.NO_DATABASE
            finally:
                self.activity.end(worked=delivery is Delivery.RAN)


def _first_line(exc: SQLAlchemyError) -> str:
    """The driver's message, first line (no SQL, no parameters)."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0][:200] if lines else ""

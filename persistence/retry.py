"""Transactions that PostgreSQL may abort because they crossed another one: a deadlock (SQLSTATE
40P01) or a serialisation failure (40001). Such an abort says nothing about the database's health
and nothing about the job: the transaction is run again in place, after a short random pause
(``transaction``), and never counts as an attempt of the job. Any other database error is raised
as before (the database is unreachable: the job is taken again once it is back).

**Lock order.** Every transaction of the service that locks more than one row takes them in this
order, so two of them never wait for one another in a circle:

1. the team row (``UnitRepository.team_running_locked``, only for a capped team);
2. the job row (``JobRepository.lock_running``/``claim``/``keep_alive``/``request_cancel``, and
   every ``EventRepository.append``, which bumps ``jobs.event_seq``): the api's interactive steps
   (``api.interactive``: a verdict locks the job before it takes the pending iteration), cancels
   and deletes take it first too;
3. the job's ``check_units`` rows (claim, renew, finish, cancel); a transaction that
   locks units of several jobs without their job rows (``UnitRepository.requeue_expired``) skips
   the locked ones instead of waiting.

The api runs its writes (a verdict, a cancel, a retry, a delete's cancel) through ``transaction``
as the workers do; a conflict that outlives every try answers 409 with ``Retry-After``
(``api.problems``), never 503: the database is not down.

The retry stays as a safety net for what the order does not cover (a lock taken by a foreign key,
an index page)."""

from __future__ import annotations

import logging
import random
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.orm import Session

from persistence.db import Database

log = logging.getLogger("onnx_reducer.db")
T = TypeVar("T")

SERIALIZATION_FAILURE, DEADLOCK_DETECTED = "40001", "40P01"
CONFLICTS = {SERIALIZATION_FAILURE: "a serialisation failure", DEADLOCK_DETECTED: "a deadlock"}
MAX_TRIES = 6
FIRST_PAUSE_S = 0.02  # doubled after each conflict, with jitter: 20, 40, 80, 160, 320 ms


def sqlstate_of(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error (psycopg's ``sqlstate``), None when it has none."""
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return str(state) if state else None


UNREACHABLE_CLASSES = ("08", "57P", "53300")  # connection exceptions, the server shutting down, no slot left


def is_unreachable(exc: BaseException) -> bool:
    """The database could not be reached or dropped the connection (as opposed to an error in
    what was asked of it): a failed connect, a connection found dead, the pool out of
    connections, SQLSTATE class 08 / 57P / 53300."""
    if isinstance(exc, DisconnectionError | PoolTimeoutError):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    state = sqlstate_of(exc)
    if state is not None:
        return state.startswith(UNREACHABLE_CLASSES)
    # a connect that failed has no SQLSTATE (psycopg); SQLite's own errors (a missing table, a
    # locked file) are the request's, not a lost connection
    return isinstance(exc, OperationalError) and not isinstance(getattr(exc, "orig", None), sqlite3.Error)


def is_conflict(exc: BaseException) -> bool:
    """A deadlock or serialisation failure: running the transaction again may well succeed."""
    return isinstance(exc, DBAPIError) and sqlstate_of(exc) in CONFLICTS


def retry_conflicts(work: Callable[[], T], what: str, tries: int = MAX_TRIES) -> T:
    """``work()`` (one whole transaction), run again when PostgreSQL aborts it as a deadlock or a
    serialisation failure, up to ``tries`` times; the last conflict, and any other error, is raised.
    Once, too, when its connection turned out dead (the database restarted since it was last used:
    the pool pings only connections that sat idle, ``persistence.db``); the pool has started over
    then, and the second run gets a new connection."""
    reconnected = False
    attempt = 0
    while True:
        attempt += 1
        try:
            return work()
        except DBAPIError as exc:
            if exc.connection_invalidated and not reconnected:
                reconnected, attempt = True, attempt - 1
                log.warning(
                    "%s: the database connection was lost (%s); running it again", what, type(exc.orig).__name__
                )
                continue
            state = sqlstate_of(exc)
            if state not in CONFLICTS or attempt >= tries:
                raise
            pause = FIRST_PAUSE_S * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
            log.warning(
                "%s: PostgreSQL aborted the transaction with %s (SQLSTATE %s) against another transaction; "
                "running it again in %.0f ms (try %d of %d)",
                *(what, CONFLICTS[state], state, pause * 1000, attempt + 1, tries),
            )
            time.sleep(pause)


def transaction(db: Database, work: Callable[[Session], T], what: str, tries: int = MAX_TRIES) -> T:
    """``work(session)`` in one transaction (committed at the end), run again from the start in a
    fresh transaction when it is aborted as a deadlock or serialisation failure, or once when its
    connection was dead (``retry_conflicts``). ``work`` must not change anything outside the
    database that a second run would do twice."""

    def once() -> T:
        with db.session() as session:
            return work(session)

    return retry_conflicts(once, what, tries)

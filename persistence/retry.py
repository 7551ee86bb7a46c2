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
from collections.abc import Callable, Iterator
from types import TracebackType
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


class Retrying:
    """The retry rule of one transaction (``transaction``, ``attempts``): run it again when
    PostgreSQL aborts it as a deadlock or a serialisation failure, up to ``tries`` times, after a
    short random pause; once, too, when its connection turned out dead (the database restarted
    since it was last used: the pool pings only connections that sat idle, ``persistence.db``); the
    pool has started over then, and the next run gets a new connection."""

    def __init__(self, what: str, tries: int = MAX_TRIES) -> None:
        self.what, self.tries = what, tries
        self.attempt = 1
        self.reconnected = False
        self.done = False  # a run committed

    def again(self, exc: DBAPIError) -> bool:
        """Whether the transaction that ``exc`` aborted runs again (logged, after its pause)."""
        if exc.connection_invalidated and not self.reconnected:
            self.reconnected = True
            log.warning(
                "%s: the database connection was lost (%s); running it again", self.what, type(exc.orig).__name__
            )
            return True
        state = sqlstate_of(exc)
        if state not in CONFLICTS or self.attempt >= self.tries:
            return False
        pause = FIRST_PAUSE_S * 2 ** (self.attempt - 1) * random.uniform(0.5, 1.5)
        self.attempt += 1
        log.warning(
            "%s: PostgreSQL aborted the transaction with %s (SQLSTATE %s) against another transaction; "
            "running it again in %.0f ms (try %d of %d)",
            *(self.what, CONFLICTS[state], state, pause * 1000, self.attempt, self.tries),
        )
        time.sleep(pause)
        return True


class Attempt:
    """One run of a transaction (``attempts``): ``with attempt as db`` opens it, and its end
    commits, or rolls back and says whether another attempt follows (the abort is then
    swallowed); any other error goes on up. The block must end by falling through, not by
    ``return`` or ``break``: a commit that is aborted is run again only by the loop going on."""

    def __init__(self, database: Database, retrying: Retrying) -> None:
        self._scope = database.session()
        self._retrying = retrying

    def __enter__(self) -> Session:
        return self._scope.__enter__()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        try:
            self._scope.__exit__(kind, exc, tb)  # commits, or rolls back and gives ``exc`` back
        except DBAPIError as failed:  # the commit failed
            if self._retrying.again(failed):
                return True
            raise
        if exc is None:
            self._retrying.done = True
            return False
        return isinstance(exc, DBAPIError) and self._retrying.again(exc)


def attempts(database: Database, what: str, tries: int = MAX_TRIES) -> Iterator[Attempt]:
    """One transaction, run again from the start when it is aborted (``Retrying``), written where
    it is used: no frame of its own sits between its caller and its work::

        for attempt in attempts(ctx.db, "recording a verdict"):
            with attempt as db:
                outcome = work(db)

    The body must not change anything outside the database that a second run would do twice."""
    retrying = Retrying(what, tries)
    while not retrying.done:
        yield Attempt(database, retrying)


def transaction(db: Database, work: Callable[[Session], T], what: str, tries: int = MAX_TRIES) -> T:
    """``work(session)`` in one transaction (committed at the end), run again from the start in a
    fresh transaction when it is aborted as a deadlock or serialisation failure, or once when its
    connection was dead (``attempts``). ``work`` must not change anything outside the database
    that a second run would do twice."""
    for attempt in attempts(db, what, tries):
        with attempt as session:
            result = work(session)
    return result

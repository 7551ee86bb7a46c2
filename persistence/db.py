"""Engine and session factory. Commits happen at the request/task boundary (``Database.session``)."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Dialect, Engine, create_engine, event, make_url, text
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

CONNECT_TIMEOUT_S = 5
PING_AFTER_IDLE_S = 2.0  # a pooled connection idle longer is pinged before use


def _sqlite_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def normalize_url(url: str) -> str:
    """``postgresql://`` means psycopg 3 here (SQLAlchemy's default driver is psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 10})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # connect_timeout: an unreachable host fails within seconds instead of the TCP default (minutes)
    engine = create_engine(url, pool_size=10, max_overflow=20, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    event.listen(engine, "checkin", _checked_in)
    event.listen(engine, "checkout", functools.partial(_ping_if_idle, engine.dialect))
    return engine


def _checked_in(dbapi_connection: Any, record: Any) -> None:
    record.info["idle_since"] = time.monotonic()


def _ping_if_idle(dialect: Dialect, dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """A pooled connection that sat idle for ``PING_AFTER_IDLE_S`` is pinged before it is handed
    out; a dead one is replaced (the pool connects anew: a database restarted meanwhile is no
    error). One in steady use is not: a worker records a verdict every few milliseconds, and a
    ping each time (``pool_pre_ping``) was a round trip more per transaction; should the database
    go away between two such uses, the statement fails and the pool starts over."""
    idle_since = record.info.get("idle_since")
    if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_S:
        return
    try:
        dialect.do_ping(dbapi_connection)  # what ``pool_pre_ping`` runs (psycopg's: outside a transaction)
    except Exception as exc:  # whatever the driver raises for a dead connection
        raise DisconnectionError(str(exc)) from exc


def describe_url(url: str) -> str:
    """The URL without its password, for messages."""
    return make_url(normalize_url(url)).render_as_string(hide_password=True)


def database_problem(exc: SQLAlchemyError, url: str) -> str | None:
    """One line saying what is wrong with the database, for the errors a user can fix (it is not
    reachable, or has no tables yet); None for other errors."""
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    first = reason[0][:300] if reason else type(exc).__name__
    lowered = first.lower()
    if "no such table" in lowered or ("relation" in lowered and "does not exist" in lowered):
        return f"The database {describe_url(url)} has no tables yet: run `onnx-reducer db upgrade` first."
    if isinstance(exc, OperationalError | InterfaceError):
        return f"Cannot reach the database {describe_url(url)} ({first}). Is it running? Check DATABASE_URL."
    return None


class Database:
    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One unit of work: committed when the block ends, rolled back on an exception."""
        with self._sessions() as session, session.begin():
            yield session

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()

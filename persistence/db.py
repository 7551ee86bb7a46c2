"""Engine and session factory. Commits happen at the request/task boundary (``Database.session``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

CONNECT_TIMEOUT_S = 5


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
    return create_engine(
        url, pool_pre_ping=True, pool_size=10, max_overflow=20, connect_args={"connect_timeout": CONNECT_TIMEOUT_S}
    )


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

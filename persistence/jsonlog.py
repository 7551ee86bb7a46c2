"""Structured logs for the service processes (api, worker): one JSON object per line with time,
level, logger, message, and the job being worked on when there is one (``bind_job``).

Without ``LOG_FORMAT`` a process writing to a terminal (``make run``) logs plain lines, one readable
access line per request, and one writing to a pipe or file (containers, log collectors) logs JSON;
``LOG_FORMAT=json`` or ``text`` chooses either."""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import os
import sys
from collections.abc import Iterator

current_job: contextvars.ContextVar[str | None] = contextvars.ContextVar("current_job", default=None)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


@contextlib.contextmanager
def bind_job(job_id: str) -> Iterator[None]:
    """Every log record emitted inside carries ``job_id`` (per thread / task context)."""
    token = current_job.set(job_id)
    try:
        yield
    finally:
        current_job.reset(token)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, object] = {
            "time": dt.datetime.fromtimestamp(record.created, tz=dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        job_id = getattr(record, "job_id", None) or current_job.get()
        if job_id:
            payload["job_id"] = job_id
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def _default_format() -> str:
    isatty = getattr(sys.stderr, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


def configure_logging(level: int = logging.INFO, log_format: str | None = None) -> None:
    """Replace the root handlers with one stderr handler: ``log_format``, else ``LOG_FORMAT``, else
    text on a terminal and JSON elsewhere."""
    chosen = (log_format or os.environ.get("LOG_FORMAT") or _default_format()).lower()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(TEXT_FORMAT) if chosen == "text" else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "celery"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True

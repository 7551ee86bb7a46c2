"""Stopping a running check from outside (a cancelled job, a job out of time): a *stop scope*.

    with stop_checks_when(job_was_cancelled):
        verdict, output = check.run(model)     # any check kind, repeats included

While the scope is active, every check process started in this thread (``checks.capture.pump``
waits on all of them: spec kinds in their child interpreter, commands, the layerwise run) polls
``should_stop`` about every ``POLL_S``; when it answers True, the check's processes (its process
group, every descendant, also one that started a session of its own) are killed and
``CheckStoppedError`` is raised out of ``check.run``. Outside a scope nothing is polled.

A context variable rather than a parameter: ``ModelCheck.run(model_path)`` stays the one
signature of every check kind, and a scope set by one worker thread never reaches another."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

POLL_S = 0.25

_should_stop: ContextVar[Callable[[], bool] | None] = ContextVar("onnx_reducer_check_stop", default=None)


class CheckStoppedError(BaseException):
    """The check was killed because its stop scope asked for it (cancelled, out of time). A
    ``BaseException``, like ``KeyboardInterrupt``: code that turns any ``Exception`` of a check
    into a verdict or a warning must not swallow a stop."""


@contextmanager
def stop_checks_when(should_stop: Callable[[], bool]) -> Iterator[None]:
    token = _should_stop.set(should_stop)
    try:
        yield
    finally:
        _should_stop.reset(token)


def active() -> bool:
    """Whether a stop scope is active (then waits on a check are at most ``POLL_S`` long)."""
    return _should_stop.get() is not None


def stop_requested() -> bool:
    should_stop = _should_stop.get()
    return should_stop is not None and should_stop()

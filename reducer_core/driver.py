"""The sequential driver: run a ``ReductionMachine`` to its end one request at a time
(``engine.session.ReductionSession.run``; ``engine.parallel`` runs several requests at once)."""

from __future__ import annotations

import time
from collections.abc import Callable

from reducer_core.machine import ReductionMachine
from reducer_core.requests import Answer, Request
from reducer_core.verdict import Verdict


def drive(
    machine: ReductionMachine,
    execute: Callable[[Request], Answer],
    should_stop: Callable[[], bool] | None = None,
) -> bool:
    """Run ``machine`` to its end one request at a time: ``execute`` does the work (writes the
    candidate, runs the check). ``should_stop`` is polled before each request once the original
    failed; returns True when it ended the run early."""
    while not machine.done:
        if machine.original is not None and should_stop is not None and should_stop():
            return True
        for request in machine.next_requests(1):
            began = time.monotonic()
            answer = execute(request)
            took = time.monotonic() - began - (answer.duration_s if isinstance(answer, Verdict) else 0.0)
            machine.deliver(request, answer, overhead_s=max(took, 0.0))
    return False

"""The reduction loop with an injected oracle, for tests: the session's step machine
(``reducer_core.machine``) driven one check at a time by a function answering "does this
candidate fail?". The command line and the worker drive the same machine through
``engine.session.ReductionSession``."""

from __future__ import annotations

import time
from collections.abc import Callable

from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.driver import drive
from reducer_core.localization import LayerwiseResult
from reducer_core.machine import ReductionMachine
from reducer_core.records import IterationRecord, Localization, ReductionResult
from reducer_core.requests import Answer, CheckRequest, Request
from reducer_core.strategies.base import Strategy
from reducer_core.verdict import Pinning, Verdict

Oracle = Callable[[Candidate, int], Verdict]

__all__ = ["IterationRecord", "Oracle", "Reduction", "ReductionResult"]


class _Records:
    def __init__(self, on_iteration: Callable[[IterationRecord], None]) -> None:
        self.on_iteration = on_iteration

    def on_record(self, record: IterationRecord) -> None:
        self.on_iteration(record)

    def on_layerwise(self, result: LayerwiseResult) -> None:
        pass

    def on_localization(self, localization: Localization) -> None:
        pass


class Reduction:
    """Run ``strategy`` to the end, asking ``oracle(candidate, iteration)`` only for candidates not
    in ``cache``. ``pin_signature``: count a candidate as failing only when it fails like the
    original. ``should_stop`` is polled between checks; ``on_iteration`` sees every verdict;
    ``confirm_flaky``: ``SessionConfig.confirm_flaky`` (a 2-3-node answer's passing candidates
    are checked again, so ``oracle`` may see a candidate twice)."""

    def __init__(
        self,
        strategy: Strategy,
        oracle: Oracle,
        cache: VerdictCache,
        pin_signature: bool | Pinning = True,
        on_iteration: Callable[[IterationRecord], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        infra_retries: int = 2,
        confirm_flaky: bool = True,
    ) -> None:
        space = strategy.space
        config = SessionConfig(
            mode=strategy.mode,
            reduce_inputs=space.reduce_inputs,
            reduce_outputs=space.reduce_outputs,
            pin_signature=pin_signature,
            infra_retries=infra_retries,
            confirm_flaky=confirm_flaky,
        )
        listener = _Records(on_iteration or (lambda record: None))
        self.machine = ReductionMachine(space.index, config, cache, listener, strategy)
        self.oracle = oracle
        self.should_stop = should_stop

    def _execute(self, request: Request) -> Answer:
        if not isinstance(request, CheckRequest):
            raise TypeError("a Reduction never localises: it has no layerwise run to offer")
        return self.oracle(request.candidate, request.number)

    def run(self) -> ReductionResult:
        started = time.monotonic()
        stopped = drive(self.machine, self._execute, self.should_stop)
        result = self.machine.result
        result.elapsed_s = time.monotonic() - started
        result.stopped_early = stopped
        return result

"""The reduction loop: the functional core that drives a strategy with an injected oracle.

The oracle (the check) and every side effect (writing the iteration model, logging, saving the
replay) are supplied by the caller, so this loop runs the same in the CLI, in a Celery worker and
in tests that answer with a list of verdicts."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.errors import CheckInfraError, OriginalDidNotFailError
from reducer_core.strategies.base import Strategy
from reducer_core.verdict import Verdict, VerdictKind

Oracle = Callable[[Candidate, int], Verdict]


@dataclass(frozen=True)
class IterationRecord:
    number: int
    phase: str
    candidate: Candidate
    verdict: Verdict
    reproduces: bool
    cached: bool
    best_size: int
    overhead_s: float = 0.0


@dataclass
class ReductionResult:
    original: Verdict
    nodes_before: int
    min_bad: Candidate
    min_good: Candidate | None
    iterations: list[IterationRecord] = field(default_factory=list)
    checks_run: int = 0
    cache_hits: int = 0
    elapsed_s: float = 0.0
    stopped_early: bool = False

    @property
    def check_time_s(self) -> float:
        return sum(r.verdict.duration_s for r in self.iterations if not r.cached)


class Reduction:
    """Run ``strategy`` to the end, asking ``oracle`` only for candidates not in ``cache``.

    ``pin_signature``: count a candidate as failing only when it fails like the original.
    ``should_stop`` is polled between checks (cancellation); ``on_iteration`` sees every verdict.
    """

    def __init__(
        self,
        strategy: Strategy,
        oracle: Oracle,
        cache: VerdictCache,
        pin_signature: bool = True,
        on_iteration: Callable[[IterationRecord], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        infra_retries: int = 2,
    ) -> None:
        self.strategy = strategy
        self.oracle = oracle
        self.cache = cache
        self.pin_signature = pin_signature
        self.on_iteration = on_iteration or (lambda record: None)
        self.should_stop = should_stop or (lambda: False)
        self.infra_retries = infra_retries
        self.checks_run = 0
        self.iteration = 0

    def _verdict(self, candidate: Candidate) -> tuple[Verdict, bool]:
        """The cached verdict, or a fresh one. An infrastructure error is no verdict about the
        model: it is retried, never cached, and never shown to the strategy (see ``_check``)."""
        cached = self.cache.get(candidate)
        if cached is not None:
            return cached, True
        for _ in range(self.infra_retries + 1):
            verdict = self._check(candidate)
            if verdict.kind is not VerdictKind.INFRA_ERROR:
                self.cache.put(candidate, verdict)
                return verdict, False
        return verdict, False

    def _check(self, candidate: Candidate) -> Verdict:
        self.iteration += 1
        self.checks_run += 1
        return self.oracle(candidate, self.iteration)

    def check_original(self) -> Verdict:
        """Check the unreduced model; raise when it does not fail (nothing to reduce)."""
        start = Candidate(self.strategy.space.start)
        verdict, cached = self._verdict(start)
        self._record("original", start, verdict, verdict.is_failure, cached, 0.0)
        if verdict.kind is VerdictKind.INFRA_ERROR:
            raise CheckInfraError(
                f"The check could not run on the original model: {verdict.detail}. Fix the check (is the "
                "command on PATH? does it read the --iter-artifact path?) and start again."
            )
        if not verdict.is_failure:
            raise OriginalDidNotFailError(
                f"The original model did not fail the check (verdict: {verdict.kind.value}"
                f"{', ' + verdict.detail if verdict.detail else ''}). There is nothing to reduce: check "
                "that the --check command fails on the full model, or adjust --fail-code/--fail-regex."
            )
        return verdict

    def run(self) -> ReductionResult:
        started = time.monotonic()
        original = self.check_original()
        result = ReductionResult(original, len(self.strategy.space.start), self.strategy.best_bad, None)
        while (candidate := self.strategy.propose()) is not None:
            if self.should_stop():
                result.stopped_early = True
                break
            before = time.monotonic()
            verdict, cached = self._verdict(candidate)
            if verdict.kind is VerdictKind.INFRA_ERROR:
                self._record(self.strategy.phase, candidate, verdict, False, cached, 0.0)
                raise CheckInfraError(
                    f"The check failed to run {self.infra_retries + 1} times in a row on a candidate of "
                    f"{len(candidate)} nodes: {verdict.detail}. This is not a verdict about the model; the "
                    "reduction stopped without recording it. Fix the infrastructure and resume (the saved "
                    "replay/state skips every finished check)."
                )
            failed = verdict.reproduces(original, self.pin_signature)
            self.strategy.observe(candidate, failed, verdict.kind is VerdictKind.PASS)
            overhead = time.monotonic() - before - (0.0 if cached else verdict.duration_s)
            result.iterations.append(self._record(self.strategy.phase, candidate, verdict, failed, cached, overhead))
        result.min_bad = self.strategy.best_bad
        result.min_good = self.strategy.best_good
        result.checks_run = self.checks_run
        result.cache_hits = self.cache.hits
        result.elapsed_s = time.monotonic() - started
        return result

    def _record(
        self, phase: str, candidate: Candidate, verdict: Verdict, failed: bool, cached: bool, overhead: float
    ) -> IterationRecord:
        record = IterationRecord(
            number=self.iteration,
            phase=phase,
            candidate=candidate,
            verdict=verdict,
            reproduces=failed,
            cached=cached,
            best_size=len(self.strategy.best_bad),
            overhead_s=max(overhead, 0.0),
        )
        self.on_iteration(record)
        return record

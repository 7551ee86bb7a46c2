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
from reducer_core.verdict import Pinning, Verdict, VerdictKind

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
    def pinned_out(self) -> int:
        """Distinct candidates whose verdict signature pinning changed: they failed, but not like
        the original, so they did not count (``Verdict.changed_by_pinning``)."""
        changed = {
            r.candidate.fingerprint
            for r in self.iterations
            if r.phase != "original" and r.verdict.changed_by_pinning(self.original, r.reproduces)
        }
        return len(changed)

    @property
    def check_time_s(self) -> float:
        """Time spent in checks that ran (the original's included; cached verdicts cost none)."""
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
        pin_signature: bool | Pinning = True,
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
        self.records: list[IterationRecord] = []
        """Every verdict seen, the original's first, in order (``ReductionResult.iterations``)."""

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

    def run(self, original: Verdict | None = None) -> ReductionResult:
        """Reduce to the end. ``original``: the verdict of ``check_original()`` when the caller
        already made it (e.g. before trying localisation), so it is not checked or logged twice."""
        started = time.monotonic()
        original = original if original is not None else self.check_original()
        stopped_early = False
        while (candidate := self.strategy.propose()) is not None:
            if self.should_stop():
                stopped_early = True
                break
            before = time.monotonic()
            verdict, cached = self._verdict(candidate)
            self._stop_on_infra_error(candidate, verdict, cached)
            failed = verdict.reproduces(original, self.pin_signature)
            self.strategy.observe(candidate, failed, verdict.kind is VerdictKind.PASS)
            overhead = time.monotonic() - before - (0.0 if cached else verdict.duration_s)
            self._record(self.strategy.phase, candidate, verdict, failed, cached, overhead)
        result = self.finish(original, started)
        result.stopped_early = stopped_early
        return result

    def check_candidate(self, candidate: Candidate, phase: str, original: Verdict) -> Verdict:
        """Check one candidate outside the strategy (e.g. localisation's guess), through the same
        cache, retries and records; the strategy does not see it."""
        verdict, cached = self._verdict(candidate)
        self._stop_on_infra_error(candidate, verdict, cached)
        self._record(phase, candidate, verdict, verdict.reproduces(original, self.pin_signature), cached, 0.0)
        return verdict

    def finish(self, original: Verdict, started: float, min_bad: Candidate | None = None) -> ReductionResult:
        """The outcome so far: the strategy's best failing and closest passing candidates, or
        ``min_bad`` when it was found another way (localisation), with every record and counter."""
        return ReductionResult(
            original=original,
            nodes_before=len(self.strategy.space.start),
            min_bad=min_bad if min_bad is not None else self.strategy.best_bad,
            min_good=None if min_bad is not None else self.strategy.best_good,
            iterations=list(self.records),
            checks_run=self.checks_run,
            cache_hits=self.cache.hits,
            elapsed_s=time.monotonic() - started,
        )

    def _stop_on_infra_error(self, candidate: Candidate, verdict: Verdict, cached: bool) -> None:
        if verdict.kind is not VerdictKind.INFRA_ERROR:
            return
        self._record(self.strategy.phase, candidate, verdict, False, cached, 0.0)
        raise CheckInfraError(
            f"The check failed to run {self.infra_retries + 1} times in a row on a candidate of "
            f"{len(candidate)} nodes: {verdict.detail}. This is not a verdict about the model; the "
            "reduction stopped without recording it. Fix the infrastructure and resume (the saved "
            "replay/state skips every finished check)."
        )

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
        self.records.append(record)
        self.on_iteration(record)
        return record

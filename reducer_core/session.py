"""One reduction session as a step machine over work requests: the same object runs in the command
line and in the service, and does no I/O.

The session's whole run is one deterministic generator (``ReductionMachine._flow``): check the
original; optionally localise (a layerwise run, then the suspect node alone); reduce with the
strategy; then, when asked for a min-good model and none was seen, probe the candidates next to
the minimal failing one. The machine turns what the flow needs into *requests*
(``next_requests``), answers from the verdict cache what is known already (a cached record, no
request), retries infrastructure errors, records every verdict and counts checks. Drivers
materialise candidates, run checks and ``deliver`` results, in any order: a verdict for a
candidate no step waits for yet is kept in the cache for later.

Its JSON ``state()`` is the verdict cache, the layerwise run's result and the counters; the flow is
a function of what the cache knows, so ``from_state`` rebuilds the exact position by replaying the
flow against the cache (no check runs), the way ``Strategy.from_state`` replays observations. No
generator, thread or file outlives a call, so any process may advance a session from its state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol

from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.errors import CheckInfraError, GoalUnreachableError, OriginalDidNotFailError, ReplayMismatchError
from reducer_core.graph import GraphIndex
from reducer_core.localization import LayerwiseResult, find_suspect, min_good_probes
from reducer_core.records import IterationRecord, Localization, ReductionResult
from reducer_core.strategies import SearchSpace, Strategy
from reducer_core.verdict import Goal, Pinning, Verdict, VerdictKind

STATE_FORMAT = "onnx-reducer-session"
STATE_VERSION = 1


@dataclass(frozen=True)
class SessionConfig:
    """What a session does. ``localize``: run the accuracy flowchart first (compare/golden checks);
    ``not_localized``: why not, when a spec check does not (reported as the localisation's reason);
    ``min_good``: spend up to two checks on a passing model next to the result when none was seen.
    ``goal``: ``Goal.PASS`` looks for the smallest node set with which the check passes (the nodes
    kept in fp32 of ``onnx-reducer precision``): the empty set is the original (it must not pass),
    the whole set must pass, and neither localisation nor min-good probes apply."""

    mode: str = "auto"
    reduce_inputs: bool = True
    reduce_outputs: bool = True
    pin_signature: bool | Pinning = True  # True: the default pinning (kind), False: off
    localize: bool = False
    min_good: bool = False
    infra_retries: int = 2
    not_localized: str = field(default="", compare=False)
    goal: Goal = Goal.FAILURE

    def space(self, index: GraphIndex) -> SearchSpace:
        subgraphs = self.goal is Goal.FAILURE
        return SearchSpace(index, index.all_nodes(), self.reduce_inputs, self.reduce_outputs, subgraphs)

    def to_json(self) -> dict[str, Any]:
        """The fields that decide which checks run (and so must match on resume); ``goal`` only
        when it is not the default (sessions saved before it existed resume unchanged)."""
        skip = {"infra_retries", "not_localized", "goal"}
        saved = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        saved["pin_signature"] = _pinning_json(Pinning.of(self.pin_signature))
        if self.goal is not Goal.FAILURE:
            saved["goal"] = self.goal.value
        return saved


def _pinning_json(pinning: Pinning) -> bool | str:
    """``true``/``false`` for the default and off (as sessions saved before ``strict`` existed),
    ``"strict"`` for strict pinning."""
    return pinning.value if pinning is Pinning.STRICT else pinning is Pinning.KIND


@dataclass(frozen=True)
class CheckRequest:
    """Check ``candidate``. ``attempt`` counts infrastructure-error retries (0 first); ``number`` is
    the iteration number (the driver's ``--iter-info``/artifact name), not part of the id."""

    candidate: Candidate
    phase: str
    attempt: int = 0
    number: int = field(default=0, compare=False)
    kind: ClassVar[str] = "check"

    @property
    def id(self) -> str:
        return f"check:{self.candidate.fingerprint}:{self.attempt}"


@dataclass(frozen=True)
class LayerwiseRequest:
    """Run the full model once with every tensor marked as an output (``engine.localize``)."""

    kind: ClassVar[str] = "layerwise"

    @property
    def id(self) -> str:
        return "layerwise"


Request = CheckRequest | LayerwiseRequest
Answer = Verdict | LayerwiseResult


@dataclass(frozen=True)
class _CheckStep:
    candidate: Candidate
    phase: str


@dataclass(frozen=True)
class _LayerwiseStep:
    pass


_Step = _CheckStep | _LayerwiseStep
_Flow = Generator[_Step, Answer, None]


class SessionListener(Protocol):
    """What a driver hears from the machine, as it happens (never during a replay)."""

    def on_record(self, record: IterationRecord) -> None:
        """Every verdict, cached ones included, in order; a check's record comes after the session
        took it in (its cache and state include it)."""

    def on_layerwise(self, result: LayerwiseResult) -> None:
        """The layerwise run's result was taken in."""

    def on_localization(self, localization: Localization) -> None:
        """The flowchart settled: the node it found, or why the strategy reduces instead."""


class SilentListener:
    def on_record(self, record: IterationRecord) -> None:
        pass

    def on_layerwise(self, result: LayerwiseResult) -> None:
        pass

    def on_localization(self, localization: Localization) -> None:
        pass


class ReductionMachine:
    """``next_requests(k)`` says what work is needed now (today at most one request), ``deliver``
    takes a result in, ``done`` and ``result`` give the outcome, ``state``/``from_state`` resume.

    ``deliver`` raises ``OriginalDidNotFailError`` when the original passes and ``CheckInfraError``
    when a check failed to run ``infra_retries + 1`` times in a row (nothing about that candidate is
    cached or observed: a resumed session checks it again)."""

    def __init__(
        self,
        index: GraphIndex,
        config: SessionConfig,
        cache: VerdictCache,
        listener: SessionListener | None = None,
        strategy: Strategy | None = None,
    ) -> None:
        self.index = index
        self.config = config
        self.cache = cache
        self.listener: SessionListener = listener or SilentListener()
        self.strategy = strategy or Strategy(config.space(index), config.mode)
        self.records: list[IterationRecord] = []
        self.checks_run = 0
        self.issued = 0  # iteration numbers handed out
        self.original: Verdict | None = None
        self.layerwise: LayerwiseResult | None = None
        self.localization: Localization | None = None
        if config.not_localized and not config.localize:
            self.localization = Localization("reduction", config.not_localized, 0)
        self._found: Candidate | None = None
        self._probed_good: Candidate | None = None
        self._flow: _Flow = self._run()
        self._step: _Step | None = None
        self._started = False
        self._done = False
        self._attempt = 0
        self._request: Request | None = None
        self._replaying = False
        self._announced = self.localization is not None  # a skipped flowchart is not announced

    # -- the driver's side ---------------------------------------------------------------------

    def next_requests(self, k: int = 1) -> list[Request]:
        """The work needed now (the same request again until it is delivered); [] when done."""
        self._start()
        if self._done or k < 1 or self._step is None:
            return []
        if self._request is None:
            self._request = self._new_request(self._step)
        return [self._request]

    def deliver(self, request: Request, result: Answer, overhead_s: float = 0.0) -> None:
        """Take in the result of ``request`` (``overhead_s``: the driver's time around the check)."""
        self._start()
        if isinstance(request, LayerwiseRequest):
            if not isinstance(result, LayerwiseResult):
                raise TypeError("a layerwise request is answered with a LayerwiseResult")
            self._take_layerwise(result)
        elif not isinstance(result, Verdict):
            raise TypeError("a check request is answered with a Verdict")
        elif self._waits_for(request.candidate):
            self._take_verdict(request, result, overhead_s)
        elif result.kind is not VerdictKind.INFRA_ERROR and request.candidate not in self.cache:
            self.checks_run += 1  # a verdict no step waits for (yet): kept for later
            self.cache.put(request.candidate, result)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def best_bad(self) -> Candidate:
        return self._found if self._found is not None else self.strategy.best_bad

    @property
    def min_good(self) -> Candidate | None:
        good = self.strategy.best_good if self._found is None else None
        return good if good is not None else self._probed_good

    @property
    def result(self) -> ReductionResult:
        """The outcome so far (final once ``done``); needs the original's verdict."""
        if self.original is None:
            raise RuntimeError("The session has no result before the original model was checked.")
        return ReductionResult(
            original=self.original,
            nodes_before=len(self.strategy.space.start),
            min_bad=self.best_bad,
            min_good=self.min_good,
            iterations=list(self.records),
            checks_run=self.checks_run,
            cache_hits=self.cache.hits,
            localization=self.localization,
            goal=self.config.goal,
        )

    # -- state -----------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "graph": self.index.fingerprint,
            "config": self.config.to_json(),
            "cache": self.cache.to_json(),
            "layerwise": self.layerwise.to_json() if self.layerwise is not None else None,
            "counters": {"checks_run": self.checks_run, "cache_hits": self.cache.hits, "issued": self.issued},
        }

    @classmethod
    def from_state(
        cls,
        index: GraphIndex,
        config: SessionConfig,
        cache: VerdictCache,
        state: dict[str, Any],
        listener: SessionListener | None = None,
    ) -> ReductionMachine:
        """Rebuild a session at the position ``state`` was saved in. ``cache`` is empty and has the
        session's identity (a state of another model or check is refused). A state holding only a
        ``cache`` (what the service stored before sessions existed) resumes too."""
        _check_state(state, index, config)
        if state.get("cache"):
            cache.merge_json(state["cache"])
        machine = cls(index, config, cache, listener)
        if state.get("layerwise"):
            machine.layerwise = LayerwiseResult.from_json(state["layerwise"])
        machine._replaying = True
        machine._start()
        machine._replaying = False
        counters = state.get("counters", {})
        machine.checks_run = int(counters.get("checks_run", 0))
        machine.issued = int(counters.get("issued", 0))
        cache.hits = int(counters.get("cache_hits", 0))
        machine._announced = machine.localization is not None
        return machine

    # -- the flow --------------------------------------------------------------------------------

    def _run(self) -> _Flow:
        if self.config.goal is Goal.PASS:
            yield from self._run_to_pass()
            return
        start = Candidate(self.strategy.space.start)
        original = yield _CheckStep(start, "original")
        assert isinstance(original, Verdict)
        self.original = original
        if not original.is_failure:
            raise OriginalDidNotFailError(
                f"The original model did not fail the check (verdict: {original.kind.value}"
                f"{', ' + original.detail if original.detail else ''}). There is nothing to reduce."
            )  # the callers (command line, service) say what to change, in their own words
        if self.config.localize:
            self._found = yield from self._localize(original)
        if self._found is None:
            yield from self._reduce(original)
        if self.config.min_good and self.min_good is None:
            self._probed_good = yield from self._probe_min_good()

    def _run_to_pass(self) -> _Flow:
        """``Goal.PASS``: the empty set (the original: every node converted) must not pass, the
        whole set must pass; then the strategy shrinks the whole set while the check passes."""
        nothing = Candidate(frozenset())
        original = yield _CheckStep(nothing, "original")
        assert isinstance(original, Verdict)
        self.original = original
        if original.kind is VerdictKind.PASS:
            self._found = nothing  # nothing needs the treatment: the answer is the empty set
            return
        everything = Candidate(self.strategy.space.start)
        verdict = yield _CheckStep(everything, "all-kept")
        assert isinstance(verdict, Verdict)
        if verdict.kind is not VerdictKind.PASS:
            raise GoalUnreachableError(
                f"The check does not pass even with all {len(everything)} nodes kept (verdict: "
                f"{verdict.kind.value}{', ' + verdict.detail if verdict.detail else ''})."
            )  # the callers say what it means for their treatment (not a precision problem)
        yield from self._reduce(original)

    def _localize(self, original: Verdict) -> Generator[_Step, Answer, Candidate | None]:
        layerwise = yield _LayerwiseStep()
        assert isinstance(layerwise, LayerwiseResult)
        suspect = find_suspect(self.strategy.space, layerwise, original)
        if suspect.candidate is None:
            self.localization = Localization("reduction", suspect.reason, 1)
            return None
        verdict = yield _CheckStep(suspect.candidate, "localize")
        assert isinstance(verdict, Verdict)
        if verdict.reproduces(original, self.config.pin_signature):
            self.localization = Localization("layerwise", suspect.reason, 2, suspect.candidate, suspect.tensor)
            return suspect.candidate
        reason = (
            f"the producer of '{suspect.tensor}' alone does not reproduce the failure "
            f"({verdict.kind.value} {verdict.signature})"
        )
        self.localization = Localization("reduction", reason, 2, None, suspect.tensor)
        return None

    def _reduce(self, original: Verdict) -> _Flow:
        strategy = self.strategy
        while (candidate := strategy.propose()) is not None:
            verdict = yield _CheckStep(candidate, strategy.phase)
            assert isinstance(verdict, Verdict)
            strategy.observe(candidate, self._reproduces(verdict), self._clean_miss(verdict))

    def _probe_min_good(self) -> Generator[_Step, Answer, Candidate | None]:
        for candidate in min_good_probes(self.strategy.space, self.best_bad):
            verdict = yield _CheckStep(candidate, "min-good")
            if isinstance(verdict, Verdict) and verdict.kind is VerdictKind.PASS:
                return candidate
        return None

    # -- stepping --------------------------------------------------------------------------------

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        self._feed(None)
        self._settle()

    def _feed(self, answer: Answer | None) -> None:
        """Send ``answer`` to the flow and take its next step (None: the session is done)."""
        self._request = None
        self._attempt = 0
        try:
            self._step = next(self._flow) if answer is None else self._flow.send(answer)
        except StopIteration:
            self._step, self._done = None, True

    def _settle(self) -> None:
        """Answer every step whose answer is known already (cache; a replayed layerwise result)."""
        while True:
            step = self._step
            if isinstance(step, _CheckStep) and (cached := self.cache.get(step.candidate)) is not None:
                self._answer(step, self.issued, cached, cached=True, overhead_s=0.0)
            elif isinstance(step, _LayerwiseStep) and self.layerwise is not None:
                self._feed(self.layerwise)
                self._announce_localization()
            else:
                return

    def _new_request(self, step: _Step) -> Request:
        if isinstance(step, _LayerwiseStep):
            return LayerwiseRequest()
        self.issued += 1
        return CheckRequest(step.candidate, step.phase, self._attempt, number=self.issued)

    def _waits_for(self, candidate: Candidate) -> bool:
        return isinstance(self._step, _CheckStep) and self._step.candidate == candidate

    def _take_verdict(self, request: CheckRequest, verdict: Verdict, overhead_s: float) -> None:
        step = self._step
        assert isinstance(step, _CheckStep)
        if verdict.kind is VerdictKind.INFRA_ERROR:
            if request.attempt != self._attempt:
                return  # a stale retry's answer
            self.checks_run += 1
            self._retry_or_stop(request, verdict)
            return
        self.checks_run += 1
        self.cache.put(step.candidate, verdict)
        self._answer(step, request.number, verdict, cached=False, overhead_s=overhead_s)
        self._settle()

    def _take_layerwise(self, result: LayerwiseResult) -> None:
        if not isinstance(self._step, _LayerwiseStep):
            return  # a duplicate delivery
        self.checks_run += 1
        self.layerwise = result.compact()
        self.listener.on_layerwise(self.layerwise)
        self._feed(self.layerwise)
        self._announce_localization()
        self._settle()

    def _answer(self, step: _CheckStep, number: int, verdict: Verdict, cached: bool, overhead_s: float) -> None:
        reproduces = self._reproduces(verdict)
        try:
            self._feed(verdict)
        finally:  # also when the flow refuses a passing original: its record comes first
            if not self._replaying:
                best = len(self.best_bad)
                self._record(
                    IterationRecord(number, step.phase, step.candidate, verdict, reproduces, cached, best, overhead_s)
                )
        self._announce_localization()

    def _reproduces(self, verdict: Verdict) -> bool:
        """Whether ``verdict`` is what the session looks for: the original failure (a clean pass
        for ``Goal.PASS``); before the original's verdict, any failure."""
        if self.config.goal is Goal.PASS:
            return verdict.kind is VerdictKind.PASS
        if self.original is None:
            return verdict.is_failure
        return verdict.reproduces(self.original, self.config.pin_signature)

    def _clean_miss(self, verdict: Verdict) -> bool:
        """The clean opposite of what the session looks for (a min-good candidate): a pass, or
        for ``Goal.PASS`` a plain failure (not a crash or a timeout)."""
        wanted = VerdictKind.FAIL if self.config.goal is Goal.PASS else VerdictKind.PASS
        return verdict.kind is wanted

    def _retry_or_stop(self, request: CheckRequest, verdict: Verdict) -> None:
        """An infrastructure error is no verdict about the model: ask again, up to ``infra_retries``
        times, then stop with ``CheckInfraError`` (recorded, never cached or observed)."""
        self._request = None
        if request.attempt < self.config.infra_retries:
            self._attempt = request.attempt + 1
            return
        self._attempt = 0
        self._record(
            IterationRecord(request.number, request.phase, request.candidate, verdict, False, False, len(self.best_bad))
        )
        raise CheckInfraError(_infra_message(request, verdict, self.config.infra_retries))

    def _record(self, record: IterationRecord) -> None:
        self.records.append(record)
        self.listener.on_record(record)

    def _announce_localization(self) -> None:
        if self.localization is not None and not self._announced and not self._replaying:
            self._announced = True
            self.listener.on_localization(self.localization)


def _infra_message(request: CheckRequest, verdict: Verdict, retries: int) -> str:
    if request.phase == "original":
        return f"The check could not run on the original model: {verdict.detail}."  # callers add how to fix it
    return (
        f"The check failed to run {retries + 1} times in a row on a candidate of "
        f"{len(request.candidate)} nodes: {verdict.detail}. This is not a verdict about the model; the "
        "reduction stopped without recording it. Fix the infrastructure and resume (the saved "
        "replay/state skips every finished check)."
    )


def _check_state(state: dict[str, Any], index: GraphIndex, config: SessionConfig) -> None:
    if state.get("format", STATE_FORMAT) != STATE_FORMAT or state.get("version", STATE_VERSION) != STATE_VERSION:
        raise ReplayMismatchError("This is not a saved onnx-reducer session (or one of another version).")
    if state.get("graph", index.fingerprint) != index.fingerprint:
        raise ReplayMismatchError("The saved session belongs to a different model.")
    saved = state.get("config")
    if saved is not None and saved != config.to_json():
        raise ReplayMismatchError(f"The saved session was made with other options ({saved}), not {config.to_json()}.")


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

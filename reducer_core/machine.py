"""One reduction session as a step machine over work requests: the same object runs in the command
line and in the service, and does no I/O.

The machine runs the session's flow (``reducer_core.flow``): it turns what the flow needs into
*requests* (``next_requests``), answers from the verdict cache what is known already (a cached
record, no request), retries infrastructure errors, records and numbers every verdict, counts
checks and, with spare slots, asks ahead of the flow for the candidates the strategy is likeliest
to need next. Drivers materialise candidates, run checks and ``deliver`` results, in any order: a
verdict for a candidate no step waits for yet is kept in the cache for later.

Its JSON ``state()`` (``reducer_core.state``) is the verdict cache, the layerwise run's result and
the counters; the flow is a function of what the cache knows, so ``from_state`` rebuilds the exact
position by replaying the flow against the cache (no check runs), the way ``Strategy.from_state``
replays observations. No generator, thread or file outlives a call, so any process may advance a
session from its state.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from reducer_core import bodies
from reducer_core.ahead import AheadChecks
from reducer_core.cache import REPLAY_VERSION, VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.data_reduction import PHASE as DATA_PHASE
from reducer_core.errors import CheckInfraError
from reducer_core.flakiness import FlakinessTracker
from reducer_core.flow import CheckStep, LayerwiseStep, ReductionFlow, Step, Steps
from reducer_core.graph import GraphIndex
from reducer_core.localization import LayerwiseResult
from reducer_core.records import IterationRecord, Localization, ReductionResult
from reducer_core.requests import (
    Answer,
    CheckRequest,
    LayerwiseRequest,
    Request,
    SessionListener,
    SilentListener,
    fingerprint_of,
)
from reducer_core.state import SessionState
from reducer_core.strategies import Strategy
from reducer_core.verdict import Verdict, VerdictKind


class ReductionMachine:
    """``next_requests(k, in_flight)`` says what work to start now (up to ``k`` requests: the one
    the flow waits for, then speculative checks the strategy is likely to need next), ``deliver``
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
        self.flow = self._new_flow(strategy or Strategy(config.space(index), config.mode))
        self.ahead = AheadChecks(self.flow, cache)
        self.records: list[IterationRecord] = []
        self.checks_run = 0
        self.issued = 0  # request numbers handed out
        self.recorded = 0  # records numbered (``IterationRecord.iteration``: no gap)
        self.numbered = True  # False: a state saved before records were numbered here (``recorded`` unknown)
        self.numbers: dict[str, int] = {}  # the number of each request handed out and not answered yet
        self.farm: set[str] = set()  # fingerprints whose cached verdict came from ``seed``, not recorded yet
        self._steps: Steps = self.flow.run()
        self._step: Step | None = None
        self._started = False
        self._done = False
        self._attempt = 0
        self._request: Request | None = None
        self._replaying = False
        self._announced = self.flow.localization is not None  # a skipped flowchart is not announced

    def _new_flow(self, strategy: Strategy) -> ReductionFlow:
        """The flow this machine runs (a subclass may run another: ``reducer_core.precision``)."""
        return ReductionFlow(self.index, self.config, strategy)

    # -- the driver's side ---------------------------------------------------------------------

    def next_requests(self, k: int = 1, in_flight: Collection[str] = ()) -> list[Request]:
        """Up to ``k`` requests to start now, none of them in ``in_flight`` (the ids of the requests
        the driver is running): first the one the flow waits for (the same request again until it
        is delivered), then, while the strategy reduces, speculative checks of the candidates it is
        likeliest to need next (``strategies/speculation.py``). [] when done, or when everything
        worth starting is in flight. With a deterministic check, the answer does not depend on
        ``k``: the flow only ever consumes verdicts of the candidates it asks for."""
        self._start()
        if self._done or k < 1 or self._step is None:
            return []
        if self._request is None:
            self._request = self._new_request(self._step)
        self._forget_numbers(in_flight)
        wanted: list[Request] = [] if self._request.id in in_flight else [self._request]
        if k > len(wanted) and self.ahead.allowed(self._step):
            wanted += self._speculate(k, in_flight, wanted)
        return wanted[:k]

    def deliver(self, request: Request, result: Answer, overhead_s: float = 0.0) -> None:
        """Take in the result of ``request`` (``overhead_s``: the driver's time around the check)."""
        self._start()
        self.numbers.pop(request.id, None)
        if isinstance(request, LayerwiseRequest):
            if not isinstance(result, LayerwiseResult):
                raise TypeError("a layerwise request is answered with a LayerwiseResult")
            self._take_layerwise(result)
        elif not isinstance(result, Verdict):
            raise TypeError("a check request is answered with a Verdict")
        elif self._waits_for(request.candidate, request.repeat):
            self._take_verdict(request, result, overhead_s)
        elif not self.cache.has(request.candidate, request.repeat):
            self._take_ahead(request, result, overhead_s)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def original(self) -> Verdict | None:
        return self.flow.original

    @property
    def layerwise(self) -> LayerwiseResult | None:
        return self.flow.layerwise

    @property
    def localization(self) -> Localization | None:
        return self.flow.localization

    @property
    def flakiness(self) -> FlakinessTracker:
        return self.flow.flakiness

    @property
    def result(self) -> ReductionResult:
        """The outcome so far (final once ``done``); needs the original's verdict."""
        if self.flow.original is None:
            raise RuntimeError("The session has no result before the original model was checked.")
        return ReductionResult(
            original=self.flow.original,
            nodes_before=bodies.deep_count(self.index, Candidate(self.flow.strategy.space.start)),
            min_bad=self.flow.best_bad,
            min_good=self.flow.min_good,
            iterations=list(self.records),
            checks_run=self.checks_run,
            cache_hits=self.cache.hits,
            localization=self.flow.localization,
            flakiness=self.flow.flakiness.report(),
            goal=self.config.goal,
            min_bad_size=bodies.deep_count(self.index, self.flow.best_bad),
        )

    # -- state -----------------------------------------------------------------------------------

    def state(self, verdicts: bool = True) -> dict[str, Any]:
        """The state to resume from (``reducer_core.state``); without ``verdicts`` the cache's
        entries are left out, for a store that keeps them apart (``VerdictCache.changed_since``)."""
        report = self.flow.flakiness.report()
        return SessionState(
            graph=self.index.fingerprint,
            config=self.config,
            cache=self.cache.to_json(verdicts),
            layerwise=self.flow.layerwise,
            checks_run=self.checks_run,
            cache_hits=self.cache.hits,
            issued=self.issued,
            recorded=self.recorded,
            in_flight=self.numbers,
            farm=self.farm,
            ahead=self.ahead.waiting,
            attempt=self._attempt,
            flaky=report.to_json() if report is not None else None,
        ).to_json()

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
        saved = SessionState.from_json(state, index, config)
        if saved.cache:
            cache.merge_json(saved.cache)
        machine = cls(index, config, cache, listener)
        machine.ahead.waiting = set(saved.ahead)
        machine.farm = set(saved.farm)  # also while replaying: nothing is recorded then
        if saved.layerwise is not None:
            machine.flow.layerwise = saved.layerwise
        machine._replaying = True
        machine._start()
        machine._replaying = False
        machine.checks_run = saved.checks_run
        machine.issued = saved.issued
        machine.recorded = saved.recorded
        machine.numbered = saved.numbered
        machine.numbers = dict(saved.in_flight)
        cache.hits = saved.cache_hits
        machine._announced = machine.flow.localization is not None
        machine._attempt = saved.attempt if not machine._done else 0
        return machine

    def catch_up(self, verdicts: Mapping[str, dict[str, Any]], state: dict[str, Any]) -> None:
        """Bring this machine, at a position an earlier ``state()`` of the same session was saved
        in, to the position of the later ``state`` (saved by another process since): ``verdicts``
        holds (at least) the cache entries added since (``fingerprint -> verdict JSON``). What
        ``from_state`` reaches by replaying every verdict from the start, reached by replaying only
        the new ones: the flow is a function of what the cache knows and an entry, once known, does
        not change, so the steps already taken are the ones a replay would take."""
        saved = SessionState.from_json(state, self.index, self.config)
        if verdicts:
            identity = {"tool": "onnx-reducer", "version": REPLAY_VERSION, "graph": self.cache.graph}
            self.cache.merge_json(identity | {"check": self.cache.check, "verdicts": dict(verdicts)})
        self.ahead.waiting = set(saved.ahead)
        self.farm = set(saved.farm)
        if saved.layerwise is not None and self.flow.layerwise is None:
            self.flow.layerwise = saved.layerwise
        self._request = None  # asked again as a rebuilt machine asks it (its number: ``numbers``)
        self._replaying = True
        try:
            self._start()
            if not self._done:
                self._settle()
        finally:
            self._replaying = False
        self.checks_run = saved.checks_run
        self.issued = saved.issued
        self.recorded = saved.recorded
        self.numbered = saved.numbered
        self.numbers = dict(saved.in_flight)
        self.cache.hits = saved.cache_hits
        self._announced = self.flow.localization is not None
        self._attempt = saved.attempt if not self._done else 0

    def seed(self, verdicts: Mapping[str, dict[str, Any]], layerwise: LayerwiseResult | None = None) -> int:
        """Verdicts other sessions gave on the same model and check (``fingerprint -> verdict
        JSON``; the service's farm cache) and their layerwise result: they answer their candidates
        as cached records (``source`` ``farm``), never over a verdict of this session. Any step
        they answer now is answered at once (its records are heard). Returns how many were new."""
        known = self.cache.fingerprints()
        new = {fingerprint: verdict for fingerprint, verdict in verdicts.items() if fingerprint not in known}
        if new:
            identity = {"tool": "onnx-reducer", "version": REPLAY_VERSION, "graph": self.cache.graph}
            self.cache.merge_json(identity | {"check": self.cache.check, "verdicts": new})
            self.farm |= set(new)
        if layerwise is not None and self.flow.layerwise is None:
            self.flow.layerwise = layerwise  # answers the step: no run
        if self._started and not self._done:
            self._settle()
        return len(new)

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
            self._step = next(self._steps) if answer is None else self._steps.send(answer)
        except StopIteration:
            self._step, self._done = None, True

    def _settle(self) -> None:
        """Answer every step whose answer is known already (cache; a replayed layerwise result)."""
        while True:
            step = self._step
            if isinstance(step, CheckStep) and self.ahead.answers(step):
                self._consume_ahead(step)
            elif isinstance(step, CheckStep) and (cached := self.cache.get(step.candidate, step.repeat)) is not None:
                self._answer(step, self.issued, cached, cached=True, overhead_s=0.0)
            elif isinstance(step, LayerwiseStep) and self.flow.layerwise is not None:
                self._feed(self.flow.layerwise)
                self._announce_localization()
            else:
                return

    def _new_request(self, step: Step) -> Request:
        if isinstance(step, LayerwiseStep):
            return LayerwiseRequest()
        request = CheckRequest(step.candidate, step.phase, self._attempt, repeat=step.repeat)
        return replace(request, number=self._number(request.id))

    def _number(self, request_id: str) -> int:
        """The number of request ``request_id``: the one it was handed out with while it is not
        answered (a rebuilt session asks again for the request it waits for), else the next one."""
        if request_id not in self.numbers:
            self.issued += 1
            self.numbers[request_id] = self.issued
        return self.numbers[request_id]

    def _forget_numbers(self, in_flight: Collection[str]) -> None:
        """Requests neither running (``in_flight``) nor waited for will never be answered (a
        speculative check cancelled): their numbers are no longer kept."""
        keep = set(in_flight) | ({self._request.id} if self._request is not None else set())
        self.numbers = {rid: n for rid, n in self.numbers.items() if rid in keep}

    def _waits_for(self, candidate: Candidate, repeat: int = 0) -> bool:
        step = self._step
        return isinstance(step, CheckStep) and step.candidate == candidate and step.repeat == repeat

    def _take_verdict(self, request: CheckRequest, verdict: Verdict, overhead_s: float) -> None:
        step = self._step
        assert isinstance(step, CheckStep)
        if verdict.kind is VerdictKind.INFRA_ERROR:
            if request.attempt != self._attempt:
                return  # a stale retry's answer
            self.checks_run += 1
            self._retry_or_stop(request, verdict)
            return
        self.checks_run += 1
        self.cache.put(step.candidate, verdict, step.repeat)
        self._answer(step, request.number, verdict, cached=False, overhead_s=overhead_s)
        self._settle()

    def _take_ahead(self, request: CheckRequest, verdict: Verdict, overhead_s: float) -> None:
        """A verdict no step waits for (yet): recorded as the check it was, kept for the flow."""
        self.checks_run += 1
        if verdict.kind is VerdictKind.INFRA_ERROR:
            return  # no verdict about the model: asked again if the flow ever needs it
        self.cache.put(request.candidate, verdict, request.repeat)
        if request.repeat:
            return  # a flaky check's re-check, delivered late: kept for later
        phase = DATA_PHASE if request.candidate.data else request.phase  # a size: the data step's rule
        reproduces = self.flow.reproduces_in(phase, verdict)
        self.ahead.keep(request.candidate, reproduces)
        number, best = request.number, len(self.flow.best_bad)
        self._record(IterationRecord(number, "ahead", request.candidate, verdict, reproduces, False, best, overhead_s))

    def _consume_ahead(self, step: CheckStep) -> None:
        """The flow reached a candidate checked ahead: its record was written when the verdict came."""
        self.ahead.waiting.discard(step.candidate.fingerprint)
        verdict = self.cache.peek(step.candidate)
        assert verdict is not None
        self._feed(verdict)
        self._announce_localization()

    def _speculate(self, k: int, in_flight: Collection[str], wanted: list[Request]) -> list[Request]:
        busy = {fingerprint_of(request_id) for request_id in in_flight} | {
            request.candidate.fingerprint for request in wanted if isinstance(request, CheckRequest)
        }
        chosen = self.ahead.choose(k - len(wanted), busy, self.checks_run + len(in_flight), k)
        requests: list[Request] = []
        for candidate in chosen:
            request = CheckRequest(candidate, "ahead", 0, speculative=True)
            requests.append(replace(request, number=self._number(request.id)))
        return requests

    def _take_layerwise(self, result: LayerwiseResult) -> None:
        if not isinstance(self._step, LayerwiseStep):
            return  # a duplicate delivery
        self.checks_run += 1
        self.flow.layerwise = result.compact()
        self.listener.on_layerwise(result)  # with its per-tensor errors, which the state does not keep
        self._feed(self.flow.layerwise)
        self._announce_localization()
        self._settle()

    def _answer(self, step: CheckStep, number: int, verdict: Verdict, cached: bool, overhead_s: float) -> None:
        reproduces = self.flow.reproduces_in(step.phase, verdict)
        source = self._source(step.candidate) if cached and not self._replaying else ""
        try:
            self._feed(verdict)
        finally:  # also when the flow refuses a passing original: its record comes first
            if not self._replaying:
                best = len(self.flow.best_bad)
                record = IterationRecord(
                    number, step.phase, step.candidate, verdict, reproduces, cached, best, overhead_s
                )
                self._record(replace(record, source=source))
        self._announce_localization()

    def _retry_or_stop(self, request: CheckRequest, verdict: Verdict) -> None:
        """An infrastructure error is no verdict about the model: ask again, up to ``infra_retries``
        times, then stop with ``CheckInfraError`` (recorded, never cached or observed)."""
        self._request = None
        if request.attempt < self.config.infra_retries:
            self._attempt = request.attempt + 1
            return
        self._attempt = 0
        best = len(self.flow.best_bad)
        self._record(IterationRecord(request.number, request.phase, request.candidate, verdict, False, False, best))
        raise CheckInfraError(_infra_message(request, verdict, self.config.infra_retries))

    def _source(self, candidate: Candidate) -> str:
        """Where a cached verdict came from: ``farm`` the first time a seeded one answers, else ``job``."""
        if candidate.fingerprint in self.farm:
            self.farm.discard(candidate.fingerprint)
            return "farm"
        return "job"

    def _record(self, record: IterationRecord) -> None:
        self.recorded += 1
        record = replace(record, iteration=self.recorded)
        self.records.append(record)
        self.listener.on_record(record)

    def _announce_localization(self) -> None:
        if self.flow.localization is not None and not self._announced and not self._replaying:
            self._announced = True
            self.listener.on_localization(self.flow.localization)


def _infra_message(request: CheckRequest, verdict: Verdict, retries: int) -> str:
    if request.phase == "original":
        return f"The check could not run on the original model: {verdict.detail}."  # callers add how to fix it
    return (
        f"The check failed to run {retries + 1} times in a row on a candidate of "
        f"{len(request.candidate)} nodes: {verdict.detail}. This is not a verdict about the model; the "
        "reduction stopped without recording it. Fix the infrastructure and resume (the saved "
        "replay/state skips every finished check)."
    )

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
from collections.abc import Callable, Collection, Generator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from reducer_core.body_reduction import BodySearch
from reducer_core.cache import REPLAY_VERSION, VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.data_reduction import PHASE as DATA_PHASE
from reducer_core.data_reduction import DataSearch, WeightSearch, used_candidate
from reducer_core.errors import CheckInfraError, GoalUnreachableError, OriginalDidNotFailError, ReplayMismatchError
from reducer_core.flakiness import CONFIRM_LIMIT, PROBE_BUDGET, Evidence, FlakinessTracker, Status
from reducer_core.graph import GraphIndex
from reducer_core.localization import LayerwiseResult, find_suspect, min_good_probes
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
from reducer_core.strategies import SearchSpace, Strategy
from reducer_core.strategies.base import Observation
from reducer_core.strategies.speculation import CulpritModel, gambles_allowed, speculate
from reducer_core.verdict import Goal, Verdict, VerdictKind

STATE_FORMAT = "onnx-reducer-session"
STATE_VERSION = 2  # 2: records numbered here (``recorded``), request numbers in flight, farm-seeded verdicts
STATE_VERSIONS = (1, STATE_VERSION)  # 1 still loads: its records go on after the driver's (``numbered``)


@dataclass(frozen=True)
class _CheckStep:
    candidate: Candidate
    phase: str
    repeat: int = 0


@dataclass(frozen=True)
class _LayerwiseStep:
    pass


_Step = _CheckStep | _LayerwiseStep
_Flow = Generator[_Step, Answer, None]


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
        self.strategy = strategy or Strategy(config.space(index), config.mode)
        self.records: list[IterationRecord] = []
        self.checks_run = 0
        self.issued = 0  # request numbers handed out
        self.recorded = 0  # records numbered (``IterationRecord.iteration``: no gap)
        self.numbered = True  # False: a state saved before records were numbered here (``recorded`` unknown)
        self.numbers: dict[str, int] = {}  # the number of each request handed out and not answered yet
        self.farm: set[str] = set()  # fingerprints whose cached verdict came from ``seed``, not recorded yet
        self.original: Verdict | None = None
        self.layerwise: LayerwiseResult | None = None
        self.localization: Localization | None = None
        if config.not_localized and not config.localize:
            self.localization = Localization("reduction", config.not_localized, 0)
        self._found: Candidate | None = None
        self.flakiness = FlakinessTracker()
        self._verified: Strategy | None = None  # the search again, once the check proved flaky
        self._probed_good: Candidate | None = None
        self._bodies: BodySearch | None = None  # the second level: inside Loop/If bodies
        self._data: DataSearch | None = None  # the last steps: smaller input sizes, then weights
        self._weights: DataSearch | None = None
        self._used: Candidate | None = None  # the weights sliced to the part read, when it still failed
        self._flow: _Flow = self._run()
        self._step: _Step | None = None
        self._started = False
        self._done = False
        self._attempt = 0
        self._request: Request | None = None
        self._replaying = False
        self._announced = self.localization is not None  # a skipped flowchart is not announced
        self._ahead: set[str] = set()  # fingerprints checked ahead of the flow, not consumed yet
        self._ahead_facts: list[tuple[frozenset[int], bool]] = []

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
        if k > len(wanted) and self._speculating():
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
    def best_bad(self) -> Candidate:
        if self._used is not None:
            return self._used
        if self._weights is not None:
            return self._weights.best_bad
        if self._data is not None:
            return self._data.best_bad
        if self._found is not None:
            return self._found
        if self._bodies is not None:
            return self._bodies.best_bad
        return self.strategy.best_bad if self._verified is None else self._verified.best_bad

    @property
    def min_good(self) -> Candidate | None:
        search = self.strategy if self._verified is None else self._verified
        good = search.best_good if self._found is None else None
        if self._bodies is not None and self._bodies.best_good is not None:
            good = self._bodies.best_good
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
            flakiness=self.flakiness.report(),
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
            "counters": {
                "checks_run": self.checks_run,
                "cache_hits": self.cache.hits,
                "issued": self.issued,
                "recorded": self.recorded,
            },
            "in_flight": dict(sorted(self.numbers.items())),  # request id -> the number it was handed out with
            "farm": sorted(self.farm),
            "ahead": sorted(self._ahead),
            "attempt": self._attempt,  # infrastructure retries of the step the flow waits at
            "flaky": self._flaky_json(),
        }

    def _flaky_json(self) -> dict[str, Any] | None:
        """What is known about flakiness, for readers of the state (the service's job status);
        a resumed session rebuilds it by replaying the flow, not from here."""
        report = self.flakiness.report()
        return report.to_json() if report is not None else None

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
        machine._ahead = set(state.get("ahead", ()))
        machine.farm = set(state.get("farm", ()))  # also while replaying: nothing is recorded then
        if state.get("layerwise"):
            machine.layerwise = LayerwiseResult.from_json(state["layerwise"])
        machine._replaying = True
        machine._start()
        machine._replaying = False
        counters = state.get("counters", {})
        machine.checks_run = int(counters.get("checks_run", 0))
        machine.issued = int(counters.get("issued", 0))
        machine.recorded = int(counters.get("recorded", 0))
        machine.numbered = int(state.get("version", STATE_VERSION)) >= 2 and "recorded" in counters
        machine.numbers = {str(k): int(v) for k, v in state.get("in_flight", {}).items()}
        cache.hits = int(counters.get("cache_hits", 0))
        machine._announced = machine.localization is not None
        machine._attempt = int(state.get("attempt", 0)) if not machine._done else 0
        return machine

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
        if layerwise is not None and self.layerwise is None:
            self.layerwise = layerwise  # answers the step: no run
        if self._started and not self._done:
            self._settle()
        return len(new)

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
            yield from self._reduce_bodies()
        if self.config.min_good and self.min_good is None:
            self._probed_good = yield from self._probe_min_good()
        yield from self._reduce_data()

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
            failed, passed = yield from self._observe(candidate, strategy.phase)
            strategy.observe(candidate, failed, passed)
            if self.flakiness.flaky:
                break  # what the search did next was steered by passes that may be false
        if self.config.confirms and self.flakiness.status is Status.UNKNOWN:
            yield from self._confirm_small_answer()
        if self.flakiness.flaky:
            yield from self._reduce_verified()

    def _reduce_bodies(self) -> _Flow:
        """Hierarchical delta debugging's second level (``reducer_core.body_reduction``): inside
        the bodies of the Loop/If nodes of the minimal outer answer. Not for a flaky check, nor
        with inputs or outputs pinned (hoisted body tensors become graph inputs)."""
        space = self.strategy.space
        if self.flakiness.flaky or not (self.config.reduce_bodies and space.reduce_inputs and space.reduce_outputs):
            return
        bodies = BodySearch.start(self.index, self.strategy.best_bad, self.config.mode)
        if bodies is None:
            return
        self._bodies = bodies
        while (candidate := bodies.propose()) is not None:
            verdict = yield _CheckStep(candidate, bodies.phase)
            assert isinstance(verdict, Verdict)
            bodies.observe(candidate, self._reproduces(verdict), self._clean_miss(verdict))

    def _reduce_data(self) -> _Flow:
        """The last step (``reducer_core.data_reduction``): the answer's input sizes, shrunk while
        the failure reproduces, then its weights' sizes, then its weights sliced to the part its
        nodes read. Not for a flaky check (one pass would settle a size)."""
        if self.flakiness.flaky or not self.config.reduce_data:
            return
        self._data = DataSearch.start(self.index, self.best_bad)
        yield from self._search_data(self._data)
        self._weights = WeightSearch.start(self.index, self.best_bad)
        yield from self._search_data(self._weights)
        used = used_candidate(self.index, self.best_bad)
        if used is not None:
            verdict = yield _CheckStep(used, DATA_PHASE)
            assert isinstance(verdict, Verdict)
            self._used = used if self._reproduces(verdict) else None

    def _search_data(self, search: DataSearch | None) -> _Flow:
        while search is not None and (candidate := search.propose()) is not None:
            verdict = yield _CheckStep(candidate, DATA_PHASE)
            assert isinstance(verdict, Verdict)
            search.observe(candidate, self._reproduces(verdict))

    def _confirm_small_answer(self) -> Generator[_Step, Answer, None]:
        """An answer of 2 to ``CONFIRM_LIMIT`` nodes: ``CONFIRM_LIMIT`` re-checks, taking in turn the
        candidates inside it that passed their one run, largest first (``SessionConfig.confirm_flaky``).
        A flaky single culprit ends here when the one-node candidate happened to pass and nothing else
        was inconsistent; a failing re-check makes the check flaky and the verified search finds the
        culprit. A deterministic check pays these re-checks and nothing else."""
        best = self.strategy.best_bad
        if not 2 <= len(best) <= CONFIRM_LIMIT:
            return
        inside = self.flakiness.passing_inside(best)
        for turn in range(CONFIRM_LIMIT if inside else 0):
            candidate = inside[turn % len(inside)]
            repeat = self.flakiness.runs(candidate)
            verdict = yield _CheckStep(candidate, "flaky-confirm", repeat)
            self._record_run(candidate, repeat, verdict)
            if self.flakiness.flaky:
                return

    def _reduce_verified(self) -> _Flow:
        """A flaky check: search again inside the smallest failing candidate (failures are
        trusted), with every pass verified by repeats, so the result is 1-minimal for it."""
        space = self.strategy.space
        start = self.flakiness.smallest_failing(self.best_bad)
        inside = SearchSpace(space.index, start.nodes, space.reduce_inputs, space.reduce_outputs)
        verified = self._verified = Strategy(inside, self.config.mode)
        while (candidate := verified.propose()) is not None:
            failed, passed = yield from self._observe(candidate, f"{verified.phase}-verified")
            verified.observe(candidate, failed, passed)

    def _observe(self, candidate: Candidate, phase: str) -> Generator[_Step, Answer, Observation]:
        """Check ``candidate``; a flaky check re-checks it until it fails or has passed
        ``flakiness.repeats()`` runs in a row. An inconsistency is probed on the way."""
        repeat = 0  # the first run may be known (cached) already
        while True:
            verdict = yield _CheckStep(candidate, phase, repeat)
            was_flaky = self.flakiness.flaky
            suspect = self._record_run(candidate, repeat, verdict)
            if suspect is not None:
                yield from self._probe(suspect.passing)
            if self.flakiness.flaky and not was_flaky and self._verified is None:
                return self.flakiness.settled(candidate) or (False, False)  # the search starts over
            settled = self.flakiness.settled(candidate)
            if settled is not None:
                return settled
            repeat = self.flakiness.runs(candidate)

    def _record_run(self, candidate: Candidate, repeat: int, verdict: Answer) -> Evidence | None:
        assert isinstance(verdict, Verdict)
        return self.flakiness.record(candidate, repeat, self._reproduces(verdict), self._clean_miss(verdict))

    def _probe(self, passing: Candidate) -> Generator[_Step, Answer, None]:
        """Re-check a candidate that passed although it contains a failing one, up to
        ``PROBE_BUDGET`` times: a failure shows the check is flaky, passes that it repeats."""
        for _ in range(PROBE_BUDGET):
            repeat = self.flakiness.runs(passing)
            verdict = yield _CheckStep(passing, "flaky-probe", repeat)
            assert isinstance(verdict, Verdict)
            self._record_run(passing, repeat, verdict)
            if self.flakiness.flaky:
                return
        self.flakiness.refute()

    def _probe_min_good(self) -> Generator[_Step, Answer, Candidate | None]:
        for candidate in min_good_probes(self.strategy.space, self.best_bad, self.layerwise):
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
            if isinstance(step, _CheckStep) and step.repeat == 0 and step.candidate.fingerprint in self._ahead:
                self._consume_ahead(step)
            elif isinstance(step, _CheckStep) and (cached := self.cache.get(step.candidate, step.repeat)) is not None:
                self._answer(step, self.issued, cached, cached=True, overhead_s=0.0)
            elif isinstance(step, _LayerwiseStep) and self.layerwise is not None:
                self._feed(self.layerwise)
                self._announce_localization()
            else:
                return

    def _new_request(self, step: _Step) -> Request:
        if isinstance(step, _LayerwiseStep):
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
        return isinstance(step, _CheckStep) and step.candidate == candidate and step.repeat == repeat

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
        reproduces = self._reproduces(verdict)
        self._ahead.add(request.candidate.fingerprint)
        self._ahead_facts.append((request.candidate.nodes, reproduces))
        number, best = request.number, len(self.best_bad)
        self._record(IterationRecord(number, "ahead", request.candidate, verdict, reproduces, False, best, overhead_s))

    def _consume_ahead(self, step: _CheckStep) -> None:
        """The flow reached a candidate checked ahead: its record was written when the verdict came."""
        self._ahead.discard(step.candidate.fingerprint)
        verdict = self.cache.peek(step.candidate)
        assert verdict is not None
        self._feed(verdict)
        self._announce_localization()

    def _speculating(self) -> bool:
        """Whether speculation may follow the strategy now: the flow waits for the strategy's own
        proposal, or for the original's verdict when the reduction comes next (speculating that
        the original fails, as it must for a reduction to happen)."""
        step = self._step
        if not isinstance(step, _CheckStep) or self._found is not None or step.repeat:
            return False
        if self.flakiness.flaky:
            return False  # a speculative verdict is one run: not worth a slot once passes need repeats
        if self.original is None:  # a Goal.PASS session checks the whole set next, not the strategy's proposal
            return not self.config.localize and self.config.goal is Goal.FAILURE
        return step.candidate == self.strategy.propose()

    def _speculate(self, k: int, in_flight: Collection[str], wanted: list[Request]) -> list[Request]:
        busy = {fingerprint_of(request_id) for request_id in in_flight} | {
            request.candidate.fingerprint for request in wanted if isinstance(request, CheckRequest)
        }
        model = CulpritModel.start(self.strategy.space.start).learn_all([*self.strategy.facts, *self._ahead_facts])
        gambles = gambles_allowed(self.checks_run + len(in_flight), len(self.strategy.facts), k)
        chosen = speculate(self.strategy, self._known, busy, k - len(wanted), model, gambles)
        requests: list[Request] = []
        for candidate in chosen:
            request = CheckRequest(candidate, "ahead", 0, speculative=True)
            requests.append(replace(request, number=self._number(request.id)))
        return requests

    def _known(self, candidate: Candidate) -> Observation | None:
        verdict = self.cache.peek(candidate)
        if verdict is None:
            return None
        return self._reproduces(verdict), self._clean_miss(verdict)

    def _take_layerwise(self, result: LayerwiseResult) -> None:
        if not isinstance(self._step, _LayerwiseStep):
            return  # a duplicate delivery
        self.checks_run += 1
        self.layerwise = result.compact()
        self.listener.on_layerwise(result)  # with its per-tensor errors, which the state does not keep
        self._feed(self.layerwise)
        self._announce_localization()
        self._settle()

    def _answer(self, step: _CheckStep, number: int, verdict: Verdict, cached: bool, overhead_s: float) -> None:
        reproduces = self._reproduces(verdict)
        source = self._source(step.candidate) if cached and not self._replaying else ""
        try:
            self._feed(verdict)
        finally:  # also when the flow refuses a passing original: its record comes first
            if not self._replaying:
                best = len(self.best_bad)
                record = IterationRecord(
                    number, step.phase, step.candidate, verdict, reproduces, cached, best, overhead_s
                )
                self._record(replace(record, source=source))
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
    if state.get("format", STATE_FORMAT) != STATE_FORMAT or state.get("version", STATE_VERSION) not in STATE_VERSIONS:
        raise ReplayMismatchError("This is not a saved onnx-reducer session (or one of another version).")
    if state.get("graph", index.fingerprint) != index.fingerprint:
        raise ReplayMismatchError("The saved session belongs to a different model.")
    saved = state.get("config")
    if saved is not None and "confirm_flaky" not in saved:
        saved = {**saved, "confirm_flaky": True} if config.confirms else saved  # confirming only adds checks at the end
    if saved is not None and "reduce_data" not in saved and config.reduce_data:
        saved = {**saved, "reduce_data": True}  # so does shrinking the inputs: a state saved before it resumes
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

"""The reduction flow: what a session checks, in which order, as one deterministic generator.

``ReductionFlow.run()`` yields steps (``CheckStep``: check a candidate; ``LayerwiseStep``: the
layerwise run) and is sent their answers: check the original; optionally localise (a layerwise
run, then the suspect node alone); reduce with the strategy (a flaky check's answer confirmed, or
searched again with every pass verified); reduce inside the Loop/If bodies left; when asked for
a min-good model and none was seen, probe the candidates next to the minimal failing one; shrink
the answer's input and weight sizes, then slice its weights to the part read. The flow keeps
what it learnt (the original's verdict, ``best_bad``, ``min_good``, the localisation, the
flakiness evidence) and nothing else: requests, numbers, retries, records and the verdict cache
are the machine's (``reducer_core.machine``), which replays the flow against its cache to
rebuild a saved position.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from reducer_core.body_reduction import BodySearch
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.data_reduction import PHASE as DATA_PHASE
from reducer_core.data_reduction import DataSearch, WeightSearch, used_candidate
from reducer_core.data_reduction import reproduces as data_reproduces
from reducer_core.errors import GoalUnreachableError, OriginalDidNotFailError
from reducer_core.flakiness import (
    CONFIRM_LIMIT,
    ORIGINAL_REPEATS,
    PROBE_BUDGET,
    Evidence,
    FlakinessTracker,
    Status,
)
from reducer_core.graph import GraphIndex
from reducer_core.localization import LayerwiseResult, find_suspect, min_good_probes
from reducer_core.records import Localization
from reducer_core.requests import Answer
from reducer_core.strategies import SearchSpace, Strategy
from reducer_core.strategies.base import Observation
from reducer_core.verdict import Goal, Verdict, VerdictKind


@dataclass(frozen=True)
class CheckStep:
    """The flow waits for the verdict of ``candidate`` (its run ``repeat``: 0 first)."""

    candidate: Candidate
    phase: str
    repeat: int = 0


@dataclass(frozen=True)
class LayerwiseStep:
    """The flow waits for the layerwise run's result."""


Step = CheckStep | LayerwiseStep
Steps = Generator[Step, Answer, None]


class ReductionFlow:
    """The flow of one session (``run``) and what it found so far. ``layerwise`` is the layerwise
    run's result once known (the machine sets it when a run, a seed or a saved state gives it)."""

    def __init__(self, index: GraphIndex, config: SessionConfig, strategy: Strategy) -> None:
        self.index = index
        self.config = config
        self.strategy = strategy
        self.flakiness = FlakinessTracker()
        self.original: Verdict | None = None
        self.layerwise: LayerwiseResult | None = None
        self.localization: Localization | None = None
        if config.not_localized and not config.localize:
            self.localization = Localization("reduction", config.not_localized, 0)
        self.found: Candidate | None = None  # the answer found without the strategy (localised; a precision pass)
        self._verified: Strategy | None = None  # the search again, once the check proved flaky
        self._probed_good: Candidate | None = None
        self._bodies: BodySearch | None = None  # the second level: inside Loop/If bodies
        self._data: DataSearch | None = None  # the last steps: smaller input sizes, then weights
        self._weights: DataSearch | None = None
        self._used: Candidate | None = None  # the weights sliced to the part read, when it still failed

    @property
    def best_bad(self) -> Candidate:
        if self._used is not None:
            return self._used
        if self._weights is not None:
            return self._weights.best_bad
        if self._data is not None:
            return self._data.best_bad
        if self.found is not None:
            return self.found
        if self._bodies is not None:
            return self._bodies.best_bad
        return self.strategy.best_bad if self._verified is None else self._verified.best_bad

    @property
    def min_good(self) -> Candidate | None:
        search = self.strategy if self._verified is None else self._verified
        good = search.best_good if self.found is None else None
        if self._bodies is not None and self._bodies.best_good is not None:
            good = self._bodies.best_good
        return good if good is not None else self._probed_good

    def reproduces(self, verdict: Verdict) -> bool:
        """Whether ``verdict`` is what the session looks for: the original failure (a clean pass
        for ``Goal.PASS``); before the original's verdict, any failure."""
        if self.config.goal is Goal.PASS:
            return verdict.kind is VerdictKind.PASS
        if self.original is None:
            return verdict.is_failure
        return verdict.reproduces(self.original, self.config.pin_signature)

    def clean_miss(self, verdict: Verdict) -> bool:
        """The clean opposite of what the session looks for (a min-good candidate): a pass, or
        for ``Goal.PASS`` a plain failure (not a crash or a timeout)."""
        wanted = VerdictKind.FAIL if self.config.goal is Goal.PASS else VerdictKind.PASS
        return verdict.kind is wanted

    def run(self) -> Steps:
        """The whole flow, from the original's check to the last data step."""
        if self.config.goal is Goal.PASS:
            yield from self._run_to_pass()
            return
        original = yield from self._check_original(Candidate(self.strategy.space.start))
        self.original = original
        if self.config.localize:
            self.found = yield from self._localize(original)
        if self.found is None:
            yield from self._reduce(original)
            yield from self._reduce_bodies()
        if self.config.min_good and self.min_good is None:
            self._probed_good = yield from self._probe_min_good()
        yield from self._reduce_data()

    def _check_original(self, start: Candidate) -> Generator[Step, Answer, Verdict]:
        """The original's failing verdict. A passing original is run again (runs ``repeat`` 1 to
        ``ORIGINAL_REPEATS``, only with ``confirm_flaky``: a person is not asked again) before the
        session gives up on it: a flaky check fails the original only some of the time. A failure
        among them is evidence (the original both passed and failed: the check is flaky), and the
        reduction starts as the flaky search. Only when every run passes is it refused."""
        verdict = yield CheckStep(start, "original")
        assert isinstance(verdict, Verdict)
        runs = [verdict]
        again = ORIGINAL_REPEATS if self.config.confirms else 0
        for repeat in range(1, again + 1):
            if verdict.is_failure:
                break
            verdict = yield CheckStep(start, "original", repeat)
            assert isinstance(verdict, Verdict)
            runs.append(verdict)
        if not verdict.is_failure:
            first = runs[0]
            times = f" in {len(runs)} runs" if len(runs) > 1 else ""
            raise OriginalDidNotFailError(
                f"The original model did not fail the check{times} (verdict: {first.kind.value}"
                f"{', ' + first.detail if first.detail else ''}). There is nothing to reduce."
            )  # the callers (command line, service) say what to change, in their own words
        if len(runs) > 1:  # the evidence: every run of the original, in order (the last one failed)
            for repeat, run in enumerate(runs):
                self.flakiness.record(start, repeat, run.is_failure, run.kind is VerdictKind.PASS)
        return verdict

    def _run_to_pass(self) -> Steps:
        """``Goal.PASS``: the empty set (the original: every node converted) must not pass, the
        whole set must pass; then the strategy shrinks the whole set while the check passes."""
        nothing = Candidate(frozenset())
        original = yield CheckStep(nothing, "original")
        assert isinstance(original, Verdict)
        self.original = original
        if original.kind is VerdictKind.PASS:
            self.found = nothing  # nothing needs the treatment: the answer is the empty set
            return
        everything = Candidate(self.strategy.space.start)
        verdict = yield CheckStep(everything, "all-kept")
        assert isinstance(verdict, Verdict)
        if verdict.kind is not VerdictKind.PASS:
            raise GoalUnreachableError(
                f"The check does not pass even with all {len(everything)} nodes kept (verdict: "
                f"{verdict.kind.value}{', ' + verdict.detail if verdict.detail else ''})."
            )  # the callers say what it means for their treatment (not a precision problem)
        yield from self._reduce(original)

    def _localize(self, original: Verdict) -> Generator[Step, Answer, Candidate | None]:
        layerwise = yield LayerwiseStep()
        assert isinstance(layerwise, LayerwiseResult)
        suspect = find_suspect(self.strategy.space, layerwise, original)
        if suspect.candidate is None:
            self.localization = Localization("reduction", suspect.reason, 1)
            return None
        verdict = yield CheckStep(suspect.candidate, "localize")
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

    def _reduce(self, original: Verdict) -> Steps:
        strategy = self.strategy
        while not self.flakiness.flaky and (candidate := strategy.propose()) is not None:
            failed, passed = yield from self._observe(candidate, strategy.phase)
            strategy.observe(candidate, failed, passed)
            if self.flakiness.flaky:
                break  # what the search did next was steered by passes that may be false
        if self.config.confirms and self.flakiness.status is Status.UNKNOWN:
            yield from self._confirm_small_answer()
        if self.flakiness.flaky:
            yield from self._reduce_verified()

    def _reduce_bodies(self) -> Steps:
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
            verdict = yield CheckStep(candidate, bodies.phase)
            assert isinstance(verdict, Verdict)
            bodies.observe(candidate, self.reproduces(verdict), self.clean_miss(verdict))

    def _reduce_data(self) -> Steps:
        """The last step (``reducer_core.data_reduction``): the answer's input sizes, shrunk while
        the failure reproduces, then its weights' sizes, then its weights sliced to the part its
        nodes read. Not for a flaky check (one pass would settle a size)."""
        if self.flakiness.flaky or not self.config.reduce_data:
            return
        keep, fixed = self.config.fixed_sizes, self.config.fixed_inputs  # what the user fixed never shrinks
        self._data = DataSearch.start(self.index, self.best_bad, keep, fixed)
        yield from self._search_data(self._data)
        self._weights = WeightSearch.start(self.index, self.best_bad, keep, fixed)
        yield from self._search_data(self._weights)
        used = used_candidate(self.index, self.best_bad)
        if used is not None:
            verdict = yield CheckStep(used, DATA_PHASE)
            assert isinstance(verdict, Verdict)
            self._used = used if self._data_reproduces(verdict) else None

    @property
    def data_search(self) -> DataSearch | None:
        """The data step's search that runs now or ran last (the input sizes, then the weights)."""
        return self._weights if self._weights is not None else self._data

    @property
    def data_outcomes(self) -> int:
        """How many verdicts the data step's searches used so far."""
        return sum(len(search.outcomes) for search in (self._data, self._weights) if search is not None)

    def data_search_after(self, search: DataSearch) -> DataSearch | None:
        """The search the data step runs once ``search`` (a copy of one of its searches, at its end)
        is done: the weights' sizes after the input sizes, as ``_reduce_data`` starts it."""
        if isinstance(search, WeightSearch):
            return None
        keep, fixed = self.config.fixed_sizes, self.config.fixed_inputs
        return WeightSearch.start(self.index, search.best_bad, keep, fixed)

    def _search_data(self, search: DataSearch | None) -> Steps:
        while search is not None and (candidate := search.propose()) is not None:
            verdict = yield CheckStep(candidate, DATA_PHASE)
            assert isinstance(verdict, Verdict)
            search.observe(candidate, self._data_reproduces(verdict))

    def _data_reproduces(self, verdict: Verdict) -> bool:
        """A data candidate's failure counts when it is the original's (``data_reduction.reproduces``:
        at least its family, and no runtime refusing an input's size)."""
        assert self.original is not None
        return data_reproduces(verdict, self.original, self.config.pin_signature)

    def reproduces_in(self, phase: str, verdict: Verdict) -> bool:
        """``reproduces``, as the step of ``phase`` counts it (what an iteration record says)."""
        if phase == DATA_PHASE and self.original is not None and self.config.goal is Goal.FAILURE:
            return self._data_reproduces(verdict)
        return self.reproduces(verdict)

    def _confirm_small_answer(self) -> Generator[Step, Answer, None]:
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
            verdict = yield CheckStep(candidate, "flaky-confirm", repeat)
            self._record_run(candidate, repeat, verdict)
            if self.flakiness.flaky:
                return

    def _reduce_verified(self) -> Steps:
        """A flaky check: search again inside the smallest failing candidate (failures are
        trusted), with every pass verified by repeats, so the result is 1-minimal for it."""
        space = self.strategy.space
        start = self.flakiness.smallest_failing(self.best_bad)
        inside = SearchSpace(space.index, start.nodes, space.reduce_inputs, space.reduce_outputs)
        verified = self._verified = Strategy(inside, self.config.mode)
        while (candidate := verified.propose()) is not None:
            failed, passed = yield from self._observe(candidate, f"{verified.phase}-verified")
            verified.observe(candidate, failed, passed)

    def _observe(self, candidate: Candidate, phase: str) -> Generator[Step, Answer, Observation]:
        """Check ``candidate``; a flaky check re-checks it until it fails or has passed
        ``flakiness.repeats()`` runs in a row. An inconsistency is probed on the way."""
        repeat = 0  # the first run may be known (cached) already
        while True:
            verdict = yield CheckStep(candidate, phase, repeat)
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
        return self.flakiness.record(candidate, repeat, self.reproduces(verdict), self.clean_miss(verdict))

    def _probe(self, passing: Candidate) -> Generator[Step, Answer, None]:
        """Re-check a candidate that passed although it contains a failing one, up to
        ``PROBE_BUDGET`` times: a failure shows the check is flaky, passes that it repeats."""
        for _ in range(PROBE_BUDGET):
            repeat = self.flakiness.runs(passing)
            verdict = yield CheckStep(passing, "flaky-probe", repeat)
            assert isinstance(verdict, Verdict)
            self._record_run(passing, repeat, verdict)
            if self.flakiness.flaky:
                return
        self.flakiness.refute()

    def _probe_min_good(self) -> Generator[Step, Answer, Candidate | None]:
        for candidate in min_good_probes(self.strategy.space, self.best_bad, self.layerwise):
            verdict = yield CheckStep(candidate, "min-good")
            if isinstance(verdict, Verdict) and verdict.kind is VerdictKind.PASS:
                return candidate
        return None

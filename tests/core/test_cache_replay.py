"""Verdict cache, debug replay and the reduction loop's verdict rules (pure: no I/O)."""

from __future__ import annotations

import json

import pytest

from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.errors import CheckInfraError, OriginalDidNotFailError, ReplayMismatchError
from reducer_core.graph import GraphIndex
from reducer_core.strategies import MODES, SearchSpace, Strategy
from reducer_core.verdict import MEMORY_LIMIT_SIGNATURE, Pinning, Verdict, VerdictKind
from tests.models import FAIL, PASS, FakeChecker, branchy_model, fails_with_all, index_of, names_in, reduce_with
from tests.oracle_reduction import Reduction


@pytest.fixture(scope="module")
def branchy() -> GraphIndex:
    return index_of(branchy_model())


class ToolKilledError(Exception):
    """Stands for the tool being killed in the middle of a check."""


def test_fingerprint_is_canonical() -> None:
    a = Candidate(frozenset([3, 1, 2]))
    assert a.fingerprint == Candidate(frozenset([2, 3, 1])).fingerprint
    assert a.fingerprint != Candidate(frozenset([1, 2])).fingerprint
    assert a.fingerprint != Candidate(frozenset([1, 2, 3]), primary=2).fingerprint
    assert Candidate.from_json(json.loads(json.dumps(a.to_json()))) == a
    with_primary = Candidate(frozenset([1, 2, 3]), primary=2)
    assert Candidate.from_json(json.loads(json.dumps(with_primary.to_json()))) == with_primary


def test_verdict_json_round_trip() -> None:
    verdict = Verdict(VerdictKind.TIMEOUT, "timeout", "timed out after 1s", 1.25)
    assert Verdict.from_json(json.loads(json.dumps(verdict.to_json()))) == verdict


def test_cache_counts_hits_only_on_found_verdicts() -> None:
    cache = VerdictCache("g", "c")
    candidate = Candidate(frozenset({1, 2}))
    assert cache.get(candidate) is None
    cache.put(candidate, FAIL)
    assert cache.get(Candidate(frozenset({2, 1}))) == FAIL
    assert cache.hits == 1
    assert len(cache) == 1


def test_replay_round_trip_and_refusals() -> None:
    cache = VerdictCache("graph1", "check1")
    cache.put(Candidate(frozenset({0})), FAIL)
    cache.put(Candidate(frozenset({1})), PASS)
    data = json.loads(cache.dumps())
    fresh = VerdictCache("graph1", "check1")
    assert fresh.merge_json(data) == 2
    assert fresh.get(Candidate(frozenset({0}))) == FAIL
    assert fresh.get(Candidate(frozenset({1}))) == PASS
    with pytest.raises(ReplayMismatchError, match="different model"):
        VerdictCache("graph2", "check1").merge_json(data)
    with pytest.raises(ReplayMismatchError, match="another check"):
        VerdictCache("graph1", "check2").merge_json(data)
    with pytest.raises(ReplayMismatchError, match="not an onnx-reducer debug replay"):
        VerdictCache("graph1", "check1").merge_json({"iterations": ["polygraphy replay"]})


@pytest.mark.parametrize("mode", MODES)
def test_full_replay_resumes_with_zero_checks(branchy: GraphIndex, mode: str) -> None:
    fails = fails_with_all(["C", "H"])
    first, _, _ = reduce_with(branchy, fails, mode)
    cache = VerdictCache(branchy.fingerprint, "fake")
    space = SearchSpace(branchy, branchy.all_nodes())
    first_run = Reduction(Strategy(space, mode), FakeChecker(branchy, fails), cache).run()
    saved = json.loads(cache.dumps())

    resumed_cache = VerdictCache(branchy.fingerprint, "fake")
    resumed_cache.merge_json(saved)
    checker = FakeChecker(branchy, fails)
    second = Reduction(Strategy(space, mode), checker, resumed_cache).run()
    assert checker.seen == []
    assert second.checks_run == 0
    assert second.min_bad == first_run.min_bad == first.min_bad
    assert second.min_good == first_run.min_good
    assert second.cache_hits == first_run.checks_run + first_run.cache_hits


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stop_after", [1, 3, 5])
def test_interrupted_reduction_resumes_without_rerunning_finished_checks(
    branchy: GraphIndex, mode: str, stop_after: int
) -> None:
    fails = fails_with_all(["B", "F"])
    full, full_checker, _ = reduce_with(branchy, fails, mode)
    space = SearchSpace(branchy, branchy.all_nodes())
    cache = VerdictCache(branchy.fingerprint, "fake")
    checker = FakeChecker(branchy, fails)

    def dying(candidate: Candidate, iteration: int) -> Verdict:
        if len(checker.seen) == stop_after:
            raise ToolKilledError
        return checker(candidate, iteration)

    with pytest.raises(ToolKilledError):
        Reduction(Strategy(space, mode), dying, cache).run()
    assert len(cache) == stop_after
    resumed_cache = VerdictCache(branchy.fingerprint, "fake")
    resumed_cache.merge_json(json.loads(cache.dumps()))
    rest = FakeChecker(branchy, fails)
    resumed = Reduction(Strategy(space, mode), rest, resumed_cache).run()
    assert resumed.min_bad == full.min_bad
    assert len(rest.seen) == len(full_checker.seen) - stop_after
    # only a confirming re-check (a later run of a candidate: a 2-3-node answer) sees one again
    again = [c for c in rest.seen if c.fingerprint in {d.fingerprint for d in checker.seen}]
    confirms = [r.candidate for r in resumed.iterations if r.phase == "flaky-confirm" and not r.cached]
    assert all(c in confirms for c in again)


def test_original_that_passes_stops_at_once(branchy: GraphIndex) -> None:
    checker = FakeChecker(branchy, lambda present: False)
    space = SearchSpace(branchy, branchy.all_nodes())
    with pytest.raises(OriginalDidNotFailError, match="did not fail"):
        Reduction(Strategy(space, "auto"), checker, VerdictCache("g", "c")).run()
    assert len(checker.seen) == 4  # run 3 more times first: a flaky check may pass the original once


def test_original_with_an_infrastructure_error_is_not_a_model_verdict(branchy: GraphIndex) -> None:
    space = SearchSpace(branchy, branchy.all_nodes())

    def broken(candidate: Candidate, iteration: int) -> Verdict:
        return Verdict(VerdictKind.INFRA_ERROR, "", "GPU lost")

    with pytest.raises(CheckInfraError, match="GPU lost"):
        Reduction(Strategy(space, "auto"), broken, VerdictCache("g", "c")).run()


class RuleChecker:
    """The first rule whose node is present decides the verdict (else pass)."""

    def __init__(self, index: GraphIndex, rules: dict[str, Verdict]) -> None:
        self.index = index
        self.rules = rules
        self.seen: list[Candidate] = []

    def __call__(self, candidate: Candidate, iteration: int) -> Verdict:
        self.seen.append(candidate)
        present = names_in(self.index, candidate)
        return next((v for name, v in self.rules.items() if name in present), PASS)


@pytest.mark.parametrize("mode", MODES)
def test_strict_pinning_ignores_other_signatures(branchy: GraphIndex, mode: str) -> None:
    """F fails with signature 'exit=2'; E alone fails differently ('exit=9'): strict, only F counts."""
    rules = {"F": Verdict(VerdictKind.FAIL, "exit=2"), "E": Verdict(VerdictKind.FAIL, "exit=9")}
    checker = RuleChecker(branchy, rules)
    space = SearchSpace(branchy, branchy.all_nodes())
    result = Reduction(Strategy(space, mode), checker, VerdictCache("g", "c"), Pinning.STRICT).run()
    assert names_in(branchy, result.min_bad) == {"F"}
    assert result.pinned_out >= 1


@pytest.mark.parametrize("mode", MODES)
def test_default_pinning_ignores_a_crash_for_an_exit(branchy: GraphIndex, mode: str) -> None:
    """F exits 2; E alone dies by a signal: another family, so only F counts (and the verdicts
    pinning changed are counted). Another exit code of E would count (next test)."""
    rules = {"F": Verdict(VerdictKind.FAIL, "exit=2"), "E": Verdict(VerdictKind.CRASH, "signal=SIGSEGV")}
    checker = RuleChecker(branchy, rules)
    space = SearchSpace(branchy, branchy.all_nodes())
    result = Reduction(Strategy(space, mode), checker, VerdictCache("g", "c")).run()
    assert names_in(branchy, result.min_bad) == {"F"}
    assert result.pinned_out == len(
        {c.fingerprint for c in checker.seen if names_in(branchy, c) & {"F"} == set() and "E" in names_in(branchy, c)}
    )


def test_families_of_signatures() -> None:
    exit2, exit9 = Verdict(VerdictKind.FAIL, "exit=2"), Verdict(VerdictKind.FAIL, "exit=9")
    regex_a, regex_b = Verdict(VerdictKind.FAIL, "regex=A"), Verdict(VerdictKind.FAIL, "regex=B")
    segv, abort = Verdict(VerdictKind.CRASH, "signal=SIGSEGV"), Verdict(VerdictKind.CRASH, "signal=SIGABRT")
    memory = Verdict(VerdictKind.CRASH, MEMORY_LIMIT_SIGNATURE)
    mul, add = Verdict(VerdictKind.FAIL, "op-present:Mul"), Verdict(VerdictKind.FAIL, "op-present:Add,Mul")
    nonfinite, tolerance = (
        Verdict(VerdictKind.FAIL, "mismatch:nonfinite"),
        Verdict(VerdictKind.FAIL, "mismatch:tolerance"),
    )
    error = Verdict(VerdictKind.FAIL, "error:Fail")
    same = [(exit9, exit2), (regex_b, regex_a), (abort, segv), (mul, add), (add, mul)]
    for candidate, original in same:
        assert candidate.reproduces(original), (candidate, original)
        assert not candidate.reproduces(original, Pinning.STRICT), (candidate, original)
    other = [
        (segv, exit2),
        (exit2, segv),
        (memory, segv),
        (segv, memory),
        (tolerance, nonfinite),
        (nonfinite, tolerance),
        (error, nonfinite),
        (nonfinite, error),
    ]
    for candidate, original in other:
        assert not candidate.reproduces(original), (candidate, original)
    assert segv.reproduces(exit2, Pinning.OFF) and segv.changed_by_pinning(exit2, counted=False)
    assert not memory.reproduces(segv, Pinning.OFF) and not memory.changed_by_pinning(segv, counted=False)
    assert not exit9.changed_by_pinning(exit2, counted=True)


@pytest.mark.parametrize("mode", ["auto", "minimize"])
def test_unpinned_any_failure_counts(branchy: GraphIndex, mode: str) -> None:
    """Unpinned, E's different failure counts too; auto/minimize keep whichever single node they
    reach first, but never a node that does not fail."""
    rules = {"F": Verdict(VerdictKind.FAIL, "exit=2"), "E": Verdict(VerdictKind.FAIL, "exit=9")}
    checker = RuleChecker(branchy, rules)
    space = SearchSpace(branchy, branchy.all_nodes())
    result = Reduction(Strategy(space, mode), checker, VerdictCache("g", "c"), pin_signature=False).run()
    assert len(result.min_bad) == 1
    assert names_in(branchy, result.min_bad) <= {"E", "F"}


class FlakyInfraChecker:
    """D fails; the check hits an infrastructure error on its ``bad_calls``-th calls (1-based)."""

    def __init__(self, index: GraphIndex, bad_calls: set[int]) -> None:
        self.index = index
        self.bad_calls = bad_calls
        self.calls = 0

    def __call__(self, candidate: Candidate, iteration: int) -> Verdict:
        self.calls += 1
        if self.calls in self.bad_calls:
            return Verdict(VerdictKind.INFRA_ERROR, "", "disk full")
        return FAIL if "D" in names_in(self.index, candidate) else PASS


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bad_call", [2, 3, 4, 5])
def test_a_transient_infrastructure_error_is_retried_and_changes_nothing(
    branchy: GraphIndex, mode: str, bad_call: int
) -> None:
    space = SearchSpace(branchy, branchy.all_nodes())
    clean = Reduction(Strategy(space, mode), FlakyInfraChecker(branchy, set()), VerdictCache("g", "c")).run()
    cache = VerdictCache("g", "c")
    flaky = Reduction(Strategy(space, mode), FlakyInfraChecker(branchy, {bad_call}), cache).run()
    assert names_in(branchy, flaky.min_bad) == names_in(branchy, clean.min_bad) == {"D"}
    assert flaky.checks_run == clean.checks_run + 1  # the one retry
    assert all(v["kind"] != "infra-error" for v in cache.to_json()["verdicts"].values())


@pytest.mark.parametrize("mode", MODES)
def test_a_persistent_infrastructure_error_stops_without_a_verdict_and_resumes(branchy: GraphIndex, mode: str) -> None:
    """Three infrastructure errors in a row on one candidate stop the reduction: nothing about that
    candidate is cached or observed, and a resumed run re-checks only it."""
    space = SearchSpace(branchy, branchy.all_nodes())
    cache = VerdictCache("g", "c")
    checker = FlakyInfraChecker(branchy, {3, 4, 5})
    with pytest.raises(CheckInfraError, match="not a verdict about the model"):
        Reduction(Strategy(space, mode), checker, cache).run()
    assert len(cache) == 2  # the original and the first candidate; the third call's candidate is not recorded
    resumed_cache = VerdictCache("g", "c")
    resumed_cache.merge_json(json.loads(cache.dumps()))
    resumed = Reduction(Strategy(space, mode), FlakyInfraChecker(branchy, set()), resumed_cache).run()
    assert names_in(branchy, resumed.min_bad) == {"D"}
    clean = Reduction(Strategy(space, mode), FlakyInfraChecker(branchy, set()), VerdictCache("g", "c")).run()
    assert resumed.checks_run == clean.checks_run - 2  # everything but the two cached verdicts


def test_a_crashing_candidate_is_never_the_min_good(branchy: GraphIndex) -> None:
    """Only a clean pass can be the min-good model: crashes and other failures are not good."""
    rules = {"E": Verdict(VerdictKind.FAIL, "exit=1"), "G": Verdict(VerdictKind.CRASH, "signal=SIGSEGV")}
    goods = []
    for mode in MODES:
        checker = RuleChecker(branchy, rules)
        space = SearchSpace(branchy, branchy.all_nodes())
        result = Reduction(Strategy(space, mode), checker, VerdictCache("g", "c")).run()
        assert any("G" in names_in(branchy, c) and "E" not in names_in(branchy, c) for c in checker.seen), mode
        if result.min_good is not None:
            goods.append(result.min_good)
            assert not names_in(branchy, result.min_good) & {"G", "E"}, mode
    assert goods, "some mode must find a clean pass, or the test proves nothing"


@pytest.mark.parametrize("mode", MODES)
def test_a_timing_out_original_reduces_the_timeout(branchy: GraphIndex, mode: str) -> None:
    rules = {"C": Verdict(VerdictKind.TIMEOUT, "timeout"), "A": Verdict(VerdictKind.FAIL, "exit=1")}
    checker = RuleChecker(branchy, rules)
    space = SearchSpace(branchy, branchy.all_nodes())
    result = Reduction(Strategy(space, mode), checker, VerdictCache("g", "c")).run()
    assert result.original.kind is VerdictKind.TIMEOUT
    assert names_in(branchy, result.min_bad) == {"C"}  # A's plain failure is another bug


def test_unpinned_a_timeout_counts_only_when_the_original_timed_out() -> None:
    timeout = Verdict(VerdictKind.TIMEOUT, "timeout")
    fail = Verdict(VerdictKind.FAIL, "exit=1")
    assert timeout.reproduces(timeout, pinned=False)
    assert not timeout.reproduces(fail, pinned=False)
    assert fail.reproduces(timeout, pinned=False)
    assert not fail.reproduces(timeout, pinned=True)
    assert not Verdict(VerdictKind.INFRA_ERROR).reproduces(Verdict(VerdictKind.INFRA_ERROR), pinned=True)


def test_should_stop_ends_early_with_the_best_so_far(branchy: GraphIndex) -> None:
    checker = FakeChecker(branchy, fails_with_all(["H"]))
    space = SearchSpace(branchy, branchy.all_nodes())
    result = Reduction(
        Strategy(space, "minimize"), checker, VerdictCache("g", "c"), should_stop=lambda: len(checker.seen) >= 3
    ).run()
    assert result.stopped_early
    assert len(checker.seen) == 3
    assert "H" in names_in(branchy, result.min_bad)
    assert len(result.min_bad) < len(branchy.nodes)


def test_iteration_records_cover_every_check(branchy: GraphIndex) -> None:
    seen = []
    checker = FakeChecker(branchy, fails_with_all(["E"]))
    space = SearchSpace(branchy, branchy.all_nodes())
    result = Reduction(Strategy(space, "auto"), checker, VerdictCache("g", "c"), on_iteration=seen.append).run()
    assert seen[0].phase == "original" and seen[0].number == 1
    assert [r.number for r in seen if not r.cached] == list(range(1, result.checks_run + 1))
    assert all(r.best_size >= len(result.min_bad) for r in seen)
    assert seen[-1].best_size == 1


def test_session_state_records_the_pinning_level() -> None:
    """Saved sessions keep true/false for the default and off (as before strict existed), and
    say "strict" for strict pinning, so a resumed session judges verdicts the same way."""
    assert SessionConfig(pin_signature=Pinning.KIND).to_json()["pin_signature"] is True
    assert SessionConfig(pin_signature=True).to_json() == SessionConfig(pin_signature=Pinning.KIND).to_json()
    assert SessionConfig(pin_signature=Pinning.OFF).to_json()["pin_signature"] is False
    assert SessionConfig(pin_signature=Pinning.STRICT).to_json()["pin_signature"] == "strict"


def test_the_cache_says_which_verdicts_changed_since_a_mark() -> None:
    cache = VerdictCache("g", "check")
    a, b = Candidate(frozenset([1])), Candidate(frozenset([1, 2]))
    cache.put(a, FAIL)
    mark = cache.mark
    assert cache.changed_since(mark) == {}
    cache.put(b, PASS)
    cache.put(a, FAIL)  # the same verdict again: no change
    cache.put(b, Verdict(VerdictKind.INFRA_ERROR, "", "gone"))  # not a verdict about the model
    cache.put(b, PASS, repeat=1)
    assert cache.changed_since(mark) == {b.fingerprint: PASS.to_json(), f"{b.fingerprint}~1": PASS.to_json()}
    assert set(cache.changed_since(0)) == {a.fingerprint, b.fingerprint, f"{b.fingerprint}~1"}
    assert cache.to_json(verdicts=False)["verdicts"] == {}
    assert len(cache.to_json()["verdicts"]) == 3

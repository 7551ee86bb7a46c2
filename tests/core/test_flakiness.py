"""Flaky checks (``reducer_core.flakiness`` and the session's use of it): the repeat sizing, the
evidence and rate of the tracker, and whole sessions with a check that fails on the culprit only
some of the time, drawn afresh on every run (pure: seeded draws, no files, no processes)."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable

import pytest
from onnx import helper

from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.errors import OriginalDidNotFailError, ReplayMismatchError
from reducer_core.flakiness import (
    CONFIRM_LIMIT,
    MAX_PROBES,
    MIN_RATE,
    MISS_CHANCE,
    FailureRate,
    FlakinessTracker,
    Status,
    repeats_needed,
)
from reducer_core.graph import GraphIndex
from reducer_core.machine import ReductionMachine
from reducer_core.records import ReductionResult
from reducer_core.requests import CheckRequest, Request
from reducer_core.verdict import Verdict, VerdictKind
from tests.models import FAIL, PASS, index_of, make_model


def chain(length: int) -> GraphIndex:
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i in range(length)]
    return index_of(make_model(nodes, ["t0"], [f"t{length}"]))


def cand(*nodes: int) -> Candidate:
    return Candidate(frozenset(nodes))


# -- repeats_needed ------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.15, 0.3, 0.5, 0.7, 0.9, 0.99])
def test_repeats_are_the_fewest_passing_runs_that_leave_at_most_the_miss_chance(rate: float) -> None:
    n = repeats_needed(rate)
    assert (1 - rate) ** n <= MISS_CHANCE < (1 - rate) ** (n - 1) or n == 1


def test_repeats_known_values_and_bounds() -> None:
    assert repeats_needed(0.7) == 4  # 0.3^4 = 0.0081 <= 1 %, 0.3^3 = 2.7 % is not
    assert repeats_needed(0.7, miss=0.05) == 3
    assert repeats_needed(1.0) == 1
    assert repeats_needed(0.0) == repeats_needed(MIN_RATE)  # a rate of 0 would ask for infinitely many
    assert [repeats_needed(r) for r in (0.2, 0.4, 0.6, 0.8)] == sorted(
        [repeats_needed(r) for r in (0.2, 0.4, 0.6, 0.8)], reverse=True
    )
    with pytest.raises(ValueError):
        repeats_needed(0.5, miss=0.0)


def test_the_rate_for_sizing_is_shrunk_towards_one_half() -> None:
    assert FailureRate(3, 3).estimate == 1.0 and FailureRate(3, 3).for_sizing == pytest.approx(0.8)
    assert FailureRate(7, 10).percent == 70
    assert FailureRate(0, 0).estimate == 1.0


# -- the tracker ---------------------------------------------------------------------------------


def test_a_pass_containing_a_failing_candidate_is_evidence_in_either_order() -> None:
    tracker = FlakinessTracker()
    assert tracker.record(cand(1, 2), 0, reproduced=True, clean_pass=False) is None
    evidence = tracker.record(cand(1, 2, 3), 0, reproduced=False, clean_pass=True)
    assert evidence is not None and evidence.kind == "contains-failing"
    assert evidence.passing == cand(1, 2, 3) and evidence.failing == cand(1, 2)

    later = FlakinessTracker()
    assert later.record(cand(1, 2, 3), 0, reproduced=False, clean_pass=True) is None
    evidence = later.record(cand(2), 0, reproduced=True, clean_pass=False)
    assert evidence is not None and evidence.passing == cand(1, 2, 3) and evidence.failing == cand(2)
    assert later.status is Status.UNKNOWN  # a suspicion until a probe fails


def test_a_monotone_history_is_no_evidence() -> None:
    tracker = FlakinessTracker()
    tracker.record(cand(1, 2, 3, 4), 0, reproduced=True, clean_pass=False)
    tracker.record(cand(1, 2), 0, reproduced=False, clean_pass=True)  # a subset passes: fine
    tracker.record(cand(3, 4), 0, reproduced=True, clean_pass=False)
    tracker.record(cand(1, 3, 4), 0, reproduced=False, clean_pass=False)  # another failure: not a pass
    assert tracker.evidence == [] and tracker.report() is None
    assert tracker.settled(cand(1, 2)) == (False, True)
    assert tracker.settled(cand(1, 3, 4)) == (False, False)


def test_a_repeat_that_differs_makes_the_check_flaky_and_passes_need_repeats() -> None:
    tracker = FlakinessTracker()
    tracker.record(cand(1, 2, 3), 0, reproduced=True, clean_pass=False)
    tracker.record(cand(1), 0, reproduced=False, clean_pass=True)
    assert tracker.record(cand(1), 0, reproduced=True, clean_pass=False) is None  # same run again: ignored
    assert tracker.runs(cand(1)) == 1
    tracker.record(cand(1), 1, reproduced=True, clean_pass=False)
    assert tracker.flaky and tracker.evidence[-1].kind == "repeat-differs"
    assert tracker.settled(cand(1)) == (True, False)  # a failure is trusted
    tracker.record(cand(2), 0, reproduced=False, clean_pass=True)
    assert tracker.settled(cand(2)) is None  # one pass of a flaky check proves nothing
    for run in range(1, tracker.repeats()):
        assert tracker.settled(cand(2)) is None
        tracker.record(cand(2), run, reproduced=False, clean_pass=True)
    assert tracker.settled(cand(2)) == (False, True)


def test_the_rate_counts_runs_of_candidates_holding_a_failure_only() -> None:
    tracker = FlakinessTracker()
    tracker.record(cand(1, 2, 3), 0, reproduced=True, clean_pass=False)  # holds it: 1/1
    tracker.record(cand(1, 2), 0, reproduced=False, clean_pass=True)  # not known to hold it
    tracker.record(cand(4), 0, reproduced=False, clean_pass=True)
    tracker.record(cand(3), 0, reproduced=False, clean_pass=True)
    tracker.record(cand(3), 1, reproduced=True, clean_pass=False)  # holds it: 1/2
    tracker.record(cand(3, 4), 0, reproduced=False, clean_pass=True)  # contains 3: 0/1
    assert tracker.rate() == FailureRate(failures=2, runs=4)
    report = tracker.report()
    assert report is not None and report.flaky and report.rate.percent == 50
    assert "flaky: fails ~50 % of runs" in report.message()
    saved = report.to_json()
    assert saved["fails_percent"] == 50 and saved["status"] == "flaky" and saved["rechecks"] == 1
    assert json.loads(json.dumps(saved)) == saved


def test_inconsistencies_that_repeat_exactly_mean_a_deterministic_check() -> None:
    tracker = FlakinessTracker()
    tracker.record(cand(1), 0, reproduced=True, clean_pass=False)
    for _ in range(MAX_PROBES):
        tracker.refute()
    assert tracker.status is Status.REPEATABLE
    assert tracker.record(cand(1, 2), 0, reproduced=False, clean_pass=True) is None  # no more probes
    assert tracker.settled(cand(1, 2)) == (False, True)


# -- whole sessions ------------------------------------------------------------------------------


class FlakyCheck:
    """Fails on candidates holding ``culprit`` with probability ``p``, drawn afresh on each run
    (seeded by the seed, the candidate and its run number); the original always fails."""

    def __init__(self, culprit: int, p: float, seed: int) -> None:
        self.culprit, self.p, self.seed = culprit, p, seed
        self.runs: dict[str, int] = {}

    def __call__(self, request: Request) -> Verdict:
        assert isinstance(request, CheckRequest)
        key = request.candidate.fingerprint
        run = self.runs.get(key, 0)
        self.runs[key] = run + 1
        digest = hashlib.sha256(f"{self.seed}:{key}:{run}".encode()).digest()
        draw = random.Random(digest).random()
        first = not sum(self.runs.values()) > 1
        return FAIL if self.culprit in request.candidate.nodes and (first or draw < self.p) else PASS


def run_all(machine: ReductionMachine, check: FlakyCheck, limit: int | None = None) -> list[Request]:
    seen: list[Request] = []
    while not machine.done and (limit is None or len(seen) < limit):
        (request,) = machine.next_requests(1)
        seen.append(request)
        machine.deliver(request, check(request))
    return seen


def _resumed_at_each_stop_ends_like_one_run(
    config: SessionConfig, new_check: Callable[[], FlakyCheck], stops: Callable[[int], range]
) -> ReductionMachine:
    """A 40-node chain reduced in one run, then again stopped after each of ``stops(n)`` requests
    (of the run's ``n``), its state saved as JSON and resumed: the same requests, the same end.
    Returns the one run's machine."""
    index = chain(40)
    whole = new_machine(index, config)
    sequence = [r.id for r in run_all(whole, new_check())]
    for stop in stops(len(sequence)):
        check = new_check()
        first = new_machine(index, config)
        done_before = [r.id for r in run_all(first, check, limit=stop)]
        saved = json.loads(json.dumps(first.state()))
        second = ReductionMachine.from_state(index, config, VerdictCache(index.fingerprint, "flaky"), saved)
        rest = [r.id for r in run_all(second, check)]
        assert done_before + rest == sequence, stop
        assert second.result.min_bad == whole.result.min_bad and second.checks_run == whole.checks_run
        assert second.result.flakiness == whole.result.flakiness
    return whole


def new_machine(index: GraphIndex, config: SessionConfig) -> ReductionMachine:
    return ReductionMachine(index, config, VerdictCache(index.fingerprint, "flaky"))


@pytest.mark.parametrize("seed", range(12))
def test_a_flaky_check_ends_at_the_single_culprit_when_inconsistency_shows(seed: int) -> None:
    index = chain(40)
    culprit = 17
    machine = new_machine(index, SessionConfig(confirm_flaky=True))
    requests = run_all(machine, FlakyCheck(culprit, 0.7, seed))
    result = machine.result
    assert culprit in result.min_bad.nodes  # failures are trusted: the answer always holds it
    if result.flakiness is not None and result.flakiness.flaky:
        assert result.min_bad.nodes == {culprit}
        assert len({r.id for r in requests}) == len(requests)  # every re-check had its own id
        assert any(r.repeat > 0 for r in requests if isinstance(r, CheckRequest))
    else:
        assert len(result.min_bad) <= 3  # nothing was inconsistent, even on the confirming re-checks


@pytest.mark.parametrize(("confirm", "at_least"), [(False, 34), (True, 39)])
def test_flaky_sessions_mostly_end_at_the_single_culprit(confirm: bool, at_least: int) -> None:
    """40 draws of a check failing 70 % of the time on a 200-node chain (the issue: the default
    mode ended at 2-3 nodes). Measured: 36/40 without ``confirm_flaky``, 40/40 with it (the
    default; 98/100 over 100 draws); without flakiness handling about 27/40."""
    index = chain(200)
    config = SessionConfig(confirm_flaky=confirm)
    exact = sum(_result(index, config, FlakyCheck(85, 0.7, seed)).min_bad.nodes == {85} for seed in range(40))
    assert exact >= at_least


def _result(index: GraphIndex, config: SessionConfig, check: FlakyCheck) -> ReductionResult:
    machine = new_machine(index, config)
    run_all(machine, check)
    return machine.result


@pytest.mark.parametrize("seed", [0, 5, 17])
def test_a_flaky_session_resumed_from_json_state_at_any_point_ends_like_one_run(seed: int) -> None:
    whole = _resumed_at_each_stop_ends_like_one_run(
        SessionConfig(confirm_flaky=True), lambda: FlakyCheck(17, 0.7, seed), lambda n: range(1, n, 3)
    )
    assert whole.result.flakiness is not None and whole.result.flakiness.flaky, "pick a seed that shows flakiness"
    assert whole.state()["flaky"]["status"] == "flaky"


def test_repeat_ids_differ_and_the_first_run_keeps_the_old_id() -> None:
    candidate = cand(1, 2)
    first = CheckRequest(candidate, "descent")
    again = CheckRequest(candidate, "descent", repeat=2)
    assert first.id == f"check:{candidate.fingerprint}:0"
    assert again.id == f"check:{candidate.fingerprint}:r2:0" != first.id
    cache = VerdictCache("g", "c")
    cache.put(candidate, PASS)
    cache.put(candidate, FAIL, repeat=2)
    assert cache.get(candidate) == PASS and cache.get(candidate, 2) == FAIL and not cache.has(candidate, 1)
    loaded = VerdictCache("g", "c")
    loaded.merge_json(json.loads(cache.dumps()))
    assert loaded.get(candidate, 2) == FAIL


def test_an_infrastructure_error_on_a_re_check_asks_the_same_run_again() -> None:
    index = chain(40)
    machine = new_machine(index, SessionConfig())
    check = FlakyCheck(17, 0.7, 0)
    while True:
        (request,) = machine.next_requests(1)
        assert isinstance(request, CheckRequest)
        if request.repeat > 0:
            break
        machine.deliver(request, check(request))
    machine.deliver(request, Verdict(VerdictKind.INFRA_ERROR, detail="no GPU"))
    (again,) = machine.next_requests(1)
    assert isinstance(again, CheckRequest)
    assert (again.candidate, again.repeat, again.attempt) == (request.candidate, request.repeat, 1)
    assert again.id == f"check:{request.candidate.fingerprint}:r{request.repeat}:1"
    run_all(machine, check)
    assert machine.result.min_bad.nodes == {17}


@pytest.mark.parametrize("culprits", [(17,), (5, 30), (3, 20, 33)])
def test_confirming_costs_a_deterministic_check_nothing_on_one_node_and_at_most_3_checks_else(
    culprits: tuple[int, ...],
) -> None:
    """The confirmation is on by default: a deterministic single culprit pays nothing, a pair or a
    triple at most ``CONFIRM_LIMIT`` re-checks (of candidates inside the answer that passed), and the
    answer is the one without confirmation."""
    index = chain(40)

    def deterministic(request: Request) -> Verdict:
        assert isinstance(request, CheckRequest)
        return FAIL if set(culprits) <= request.candidate.nodes else PASS

    machines = {}
    for confirm in (False, True):
        machine = machines[confirm] = new_machine(index, SessionConfig(confirm_flaky=confirm))
        while not machine.done:
            (request,) = machine.next_requests(1)
            machine.deliver(request, deterministic(request))
    plain, confirmed = machines[False].result, machines[True].result
    assert confirmed.min_bad == plain.min_bad and confirmed.min_bad.nodes == set(culprits)
    extra = [r for r in confirmed.iterations if r.phase == "flaky-confirm"]
    assert confirmed.checks_run - plain.checks_run == len(extra)
    if len(culprits) == 1:
        assert extra == []
    else:
        assert len(extra) == CONFIRM_LIMIT  # each passed once before: taken in turn
        assert all(r.candidate.nodes < confirmed.min_bad.nodes and r.verdict == PASS for r in extra)
    assert confirmed.flakiness is None and plain.flakiness is None


def test_a_session_saved_without_confirmation_resumes_with_it_but_not_the_other_way() -> None:
    """Confirming only adds checks after the search: a state saved without it (also one saved
    before the option existed) resumes under the default, and ends like a confirming run."""
    index = chain(40)
    plain, confirming = SessionConfig(confirm_flaky=False), SessionConfig()
    assert "confirm_flaky" not in plain.to_json() and confirming.to_json()["confirm_flaky"] is True
    check = FlakyCheck(17, 0.7, 17)  # seed 17: a one-node false pass only the confirmation shows
    first = new_machine(index, plain)
    run_all(first, check, limit=5)
    saved = json.loads(json.dumps(first.state()))
    resumed = ReductionMachine.from_state(index, confirming, VerdictCache(index.fingerprint, "flaky"), saved)
    run_all(resumed, check)
    whole = new_machine(index, confirming)
    run_all(whole, FlakyCheck(17, 0.7, 17))
    assert resumed.result.min_bad == whole.result.min_bad == cand(17) and resumed.checks_run == whole.checks_run
    assert any(r.phase == "flaky-confirm" for r in whole.result.iterations)
    alone = new_machine(index, plain)
    run_all(alone, FlakyCheck(17, 0.7, 17))
    assert len(alone.result.min_bad) == 2  # what the same draws give without confirming
    later = json.loads(json.dumps(whole.state()))
    with pytest.raises(ReplayMismatchError, match="other options"):
        ReductionMachine.from_state(index, plain, VerdictCache(index.fingerprint, "flaky"), later)


# -- a flaky original: its first run passed ------------------------------------------------------


class FirstRunPasses(FlakyCheck):
    """``FlakyCheck`` whose very first run (the original's) passes: the flaky original the session
    used to refuse ("the original does not fail") one time in three at 70 %."""

    def __call__(self, request: Request) -> Verdict:
        verdict = super().__call__(request)
        assert isinstance(request, CheckRequest)
        return PASS if request.phase == "original" and request.repeat == 0 else verdict


def original_runs(requests: list[Request]) -> list[int]:
    return [r.repeat for r in requests if isinstance(r, CheckRequest) and r.phase == "original"]


@pytest.mark.parametrize("seed", [s for s in range(11) if s != 5])  # 5: all 3 repeats pass too (2.7 %)
def test_a_flaky_original_that_passed_first_is_run_again_and_reduced_as_flaky(seed: int) -> None:
    index = chain(40)
    machine = new_machine(index, SessionConfig())
    requests = run_all(machine, FirstRunPasses(17, 0.7, seed))
    runs = original_runs(requests)
    assert runs == list(range(len(runs))) and 2 <= len(runs) <= 4  # repeats 1, 2, 3: the cache's repeats
    result = machine.result
    assert result.original.is_failure and result.min_bad.nodes == {17}
    assert result.flakiness is not None and result.flakiness.flaky
    whole = Candidate(index.all_nodes())
    assert result.flakiness.evidence[0].kind == "repeat-differs" and result.flakiness.evidence[0].passing == whole
    assert [r.phase for r in result.iterations[: len(runs)]] == ["original"] * len(runs)
    assert len({r.id for r in requests}) == len(requests)


def test_a_flaky_original_is_reduced_on_most_draws_and_given_up_on_none() -> None:
    """40 draws at 70 % whose original passed its first run: before, all 40 ended at once. Measured:
    39/40 at the culprit; seed 5's three repeats passed too (0.3 ** 3 = 2.7 %) and it is refused."""
    index = chain(40)
    exact, refused = 0, []
    for seed in range(40):
        machine = new_machine(index, SessionConfig())
        try:
            run_all(machine, FirstRunPasses(17, 0.7, seed))
        except OriginalDidNotFailError:
            refused.append(seed)
            continue
        exact += machine.result.min_bad.nodes == {17}
    assert exact >= 38 and len(refused) <= 1


@pytest.mark.parametrize("confirm", [True, False])
def test_an_original_that_passes_every_run_is_refused_after_four_runs(confirm: bool) -> None:
    """A deterministic pass costs 3 more runs (none without ``confirm_flaky``: an interactive job's
    person is not asked again), then the session stops as before."""
    index = chain(10)
    machine = new_machine(index, SessionConfig(confirm_flaky=confirm))
    asked: list[int] = []
    with pytest.raises(OriginalDidNotFailError, match="did not fail the check" + (" in 4 runs" if confirm else " \\(")):
        while not machine.done:
            (request,) = machine.next_requests(1)
            assert isinstance(request, CheckRequest)
            asked.append(request.repeat)
            machine.deliver(request, PASS)
    assert asked == ([0, 1, 2, 3] if confirm else [0])
    assert [r.phase for r in machine.records] == ["original"] * len(asked)


@pytest.mark.parametrize("seed", [0, 3, 7])
def test_a_flaky_original_resumed_from_json_state_at_any_point_ends_like_one_run(seed: int) -> None:
    _resumed_at_each_stop_ends_like_one_run(
        SessionConfig(), lambda: FirstRunPasses(17, 0.7, seed), lambda n: range(1, min(n, 12))
    )


@pytest.mark.parametrize("slots", [2, 4])
def test_a_flaky_original_with_several_slots_ends_at_the_culprit(slots: int) -> None:
    """``--jobs N``: speculative checks run beside the original's first run; its repeats are asked
    one at a time (no speculation on a repeat), and the session ends like the sequential one."""
    index = chain(40)
    check = FirstRunPasses(17, 0.7, 1)
    machine = new_machine(index, SessionConfig())
    asked: list[Request] = []
    while not machine.done:
        requests = machine.next_requests(slots)
        assert requests
        asked += requests
        for request in reversed(requests):  # answered out of order
            machine.deliver(request, check(request))
    repeats = [r for r in asked if isinstance(r, CheckRequest) and r.phase == "original" and r.repeat]
    assert repeats and all(not r.speculative for r in repeats)
    assert machine.result.min_bad.nodes == {17} and machine.result.flakiness is not None

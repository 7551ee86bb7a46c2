"""The pure search of pass bisection (``reducer_core.pass_bisect``): a single culprit among P
candidates named and verified both ways in at most ceil(log2 P) + 2 checks, the no-optimizer
check included, several culprits by ddmin, and the answer's words (first failing level, the
flaky-builds note)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from reducer_core.flakiness import FailureRate, FlakinessReport, Status
from reducer_core.pass_bisect import (
    Outcome,
    PassAnswer,
    PassCandidate,
    first_failing_level,
    flaky_builds_note,
    search_candidates,
    smallest_disabling_set,
)


def _needs(*culprits: str) -> tuple[Callable[[frozenset[str], str], bool], list[frozenset[str]]]:
    """A failure that needs every one of ``culprits``: disabling any one of them removes it."""
    asked: list[frozenset[str]] = []

    def fails(disabled: frozenset[str], phase: str) -> bool:
        asked.append(disabled)
        return not disabled & set(culprits)

    return fails, asked


@pytest.mark.parametrize("count", range(1, 65))
def test_a_single_culprit_is_named_and_verified_both_ways_in_ceil_log2_p_plus_two_checks(count: int) -> None:
    """Every culprit position among P = 1..64 candidates: the no-optimizer check, the halving
    and one more check at most, and among them exactly the culprit disabled passing and a check
    with the culprit on failing."""
    names = [f"T{i}" for i in range(count)]
    for culprit in names:
        fails, asked = _needs(culprit)
        result = search_candidates(names, fails)
        assert (result.outcome, result.optimizers, result.verified) == (Outcome.OPTIMIZERS, [culprit], True)
        answer = PassAnswer("onnxruntime", "all", result.outcome, candidates=[PassCandidate(n, "all") for n in names])
        assert len(asked) <= math.ceil(math.log2(count)) + 2 == answer.check_bound
        assert asked[0] == frozenset(names)  # the no-optimizer check first
        assert frozenset([culprit]) in asked  # disabled alone: passes
        assert any(culprit not in disabled for disabled in asked)  # on: fails
        assert len(set(asked)) == len(asked)  # no set is checked twice


def test_the_bound_is_tight_some_culprit_takes_every_check() -> None:
    for count in (2, 3, 5, 8, 32, 33, 64):
        names = [f"T{i}" for i in range(count)]
        most = max(_count_checks(names, culprit) for culprit in names)
        assert most == math.ceil(math.log2(count)) + 2


def _count_checks(names: list[str], culprit: str) -> int:
    fails, asked = _needs(culprit)
    search_candidates(names, fails)
    return len(asked)


def test_a_failure_that_needs_no_optimizer_says_so_in_one_check() -> None:
    for count in (0, 1, 7):
        fails, asked = _needs()  # needs none: fails whatever is disabled
        assert search_candidates([f"T{i}" for i in range(count)], fails).outcome is Outcome.NO_OPTIMIZER
        assert len(asked) == 1


def test_a_check_that_never_fails_has_nothing_to_bisect() -> None:
    assert search_candidates([], lambda disabled, role: False).outcome is Outcome.NO_FAILURE
    roles: list[str] = []

    def passes(disabled: frozenset[str], role: str) -> bool:
        roles.append(role)
        return False

    assert search_candidates(["A", "B", "C"], passes).outcome is Outcome.NO_FAILURE
    assert roles[-1] == "all-on"


def test_two_optimizers_that_each_bring_the_failure_in_need_both_disabled() -> None:
    names = [f"T{i}" for i in range(8)]
    asked: list[frozenset[str]] = []

    def fails(disabled: frozenset[str], phase: str) -> bool:  # either T2 or T6 alone makes the bad op
        asked.append(disabled)
        return not {"T2", "T6"} <= disabled

    result = search_candidates(names, fails)
    assert sorted(result.optimizers) == ["T2", "T6"] and result.verified
    assert len(set(asked)) == len(asked)  # no set is checked twice


def test_nothing_found_when_disabling_every_candidate_leaves_the_failure() -> None:
    assert smallest_disabling_set(["A", "B", "C"], lambda disabled, phase: True) is None
    assert smallest_disabling_set([], lambda disabled, phase: True) is None
    assert smallest_disabling_set(["A", "B", "C"], _needs("B")[0]) == ["B"]


def test_the_first_failing_level_is_the_highest_level_among_the_answer() -> None:
    candidates = [PassCandidate("Level1_RuleBasedTransformer", "basic"), PassCandidate("GeluFusionL2", "extended")]
    assert first_failing_level(["Level1_RuleBasedTransformer"], candidates) == "basic"
    assert first_failing_level(["GeluFusionL2", "Level1_RuleBasedTransformer"], candidates) == "extended"
    assert first_failing_level(["CUBLAS"], [PassCandidate("CUBLAS", "tactic")]) is None


def test_a_failure_of_some_builds_only_is_called_flaky_with_its_rate() -> None:
    assert flaky_builds_note(3, 3, "onnxruntime") == ""
    assert flaky_builds_note(0, 3, "onnxruntime") == ""
    note = flaky_builds_note(1, 4, "tensorrt")
    assert note.startswith("the failure comes and goes between builds: fails ~25 % of builds (1/4)")
    assert "builder flags and tactic sources" in note
    assert "tactic" not in flaky_builds_note(2, 4, "onnxruntime")


def test_the_answer_names_the_optimizers_and_the_level() -> None:
    answer = PassAnswer("onnxruntime", "all", Outcome.OPTIMIZERS, ["GeluFusionL2"], "extended", verified=True)
    assert answer.message().startswith("Disable GeluFusionL2 on onnxruntime at level all and the failure vanishes")
    assert "first appears at level extended" in answer.message()
    data = answer.to_json()
    assert data["outcome"] == "optimizers" and data["optimizers"] == ["GeluFusionL2"]
    no_optimizer = PassAnswer("onnxruntime", "all", Outcome.NO_OPTIMIZER)
    assert "needs no optimizer" in no_optimizer.message()


def test_a_flaky_tensorrt_reduction_says_the_failure_comes_and_goes_between_builds() -> None:
    report = FlakinessReport(Status.FLAKY, FailureRate(3, 10), (), repeats=4, rechecks=6)
    text = report.message("tensorrt")
    assert text.startswith("flaky: the failure comes and goes between builds: fails ~30 % of builds (3/10 builds")
    assert "bisect-passes" in text
    assert "builds" not in report.message("onnxruntime")

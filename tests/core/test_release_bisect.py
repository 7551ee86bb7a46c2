"""Release bisection's search (reducer_core.release_bisect): every boundary of 2 to 12 releases is
found in at most ceil(log2 R) + 1 release verdicts, both named releases were run, and a flaky check
gets its repeats."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from reducer_core.flakiness import ORIGINAL_REPEATS, repeats_needed
from reducer_core.release_bisect import (
    Outcome,
    ReleaseBisection,
    ReleaseError,
    ReleaseInfraError,
    max_release_checks,
    order_releases,
    parse_release_envs,
    replay,
)
from reducer_core.verdict import Verdict, VerdictKind

FAIL = Verdict(VerdictKind.FAIL, "exit=1", "exit code 1")
PASS = Verdict(VerdictKind.PASS, "", "exit code 0")


def releases(count: int) -> list[str]:
    return [f"1.{minor}.0" for minor in range(10, 10 + count)]


def run_search(search: ReleaseBisection, fails: Callable[[str], bool]) -> list[str]:
    asked: list[str] = []
    while (release := search.next_release()) is not None:
        asked.append(release)
        search.record(release, FAIL if fails(release) else PASS)
    return asked


@pytest.mark.parametrize("count", range(2, 13))
def test_every_boundary_is_found_within_the_bound(count: int) -> None:
    names = releases(count)
    for first_bad in range(count):  # first_bad == 0: every release fails
        search = ReleaseBisection(reversed(names))
        asked = run_search(search, lambda r, fb=first_bad: names.index(r) >= fb)  # type: ignore[misc]
        answer = search.answer()
        assert len(set(asked)) == len(asked) == answer.checks <= max_release_checks(count)
        assert asked[0] == names[-1]  # the newest first
        assert answer.first_failing is not None and answer.first_failing.release == names[first_bad]
        assert answer.first_failing.fails and answer.first_failing.release in asked
        if first_bad == 0:
            assert answer.outcome is Outcome.ALL_FAIL and answer.last_passing is None
        else:
            assert answer.outcome is Outcome.FOUND
            assert answer.last_passing is not None and answer.last_passing.release == names[first_bad - 1]
            assert not answer.last_passing.fails and answer.last_passing.release in asked


def test_bound_values() -> None:
    assert [max_release_checks(r) for r in (2, 3, 4, 5, 8, 9)] == [2, 3, 3, 4, 4, 5]


def test_a_passing_newest_release_is_one_check() -> None:
    search = ReleaseBisection(releases(5))
    assert run_search(search, lambda r: False) == ["1.14.0"]
    answer = search.answer()
    assert answer.outcome is Outcome.NEWEST_PASSES and answer.first_failing is None and answer.checks == 1
    assert "passes" in answer.message()


def test_three_releases_failing_from_the_second() -> None:
    search = ReleaseBisection(["1.32.0", "1.30.0", "1.31.0"])
    assert run_search(search, lambda r: r >= "1.31") == ["1.32.0", "1.30.0", "1.31.0"]
    data = search.answer().to_json()
    assert data["first_failing"] == "1.31.0" and data["last_passing"] == "1.30.0"
    assert data["strip"] == [
        {"release": "1.30.0", "state": "pass"},
        {"release": "1.31.0", "state": "fail"},
        {"release": "1.32.0", "state": "fail"},
    ]
    assert data["checks"] == data["max_checks"] == 3


def test_a_failure_of_another_family_counts_as_passing() -> None:
    """The newest release's failure is the one bisected: a crash on an older release is not it."""
    crash = Verdict(VerdictKind.CRASH, "signal=SIGSEGV", "killed")
    search = ReleaseBisection(releases(3))
    search.record("1.12.0", FAIL)
    search.record("1.10.0", crash)
    search.record("1.11.0", FAIL)
    answer = search.answer()
    assert answer.last_passing is not None and answer.last_passing.release == "1.10.0"
    assert answer.last_passing.verdict.kind is VerdictKind.CRASH


def test_flaky_check_uses_repeats_and_finds_the_boundary() -> None:
    names = releases(8)
    first_bad = 5
    rng = random.Random(7)

    def flaky_fails(release: str) -> bool:
        return names.index(release) >= first_bad and rng.random() < 0.5

    found = 0
    for _ in range(20):
        search = ReleaseBisection(names, flaky=True)
        while (release := search.next_release()) is not None:
            search.record(release, FAIL if flaky_fails(release) else PASS)
        answer = search.answer()
        if answer.outcome is Outcome.NEWEST_PASSES:
            continue  # 1 - 0.5 ** 4 of the time the newest fails within its 4 runs
        assert answer.checks <= max_release_checks(8)
        assert answer.runs > answer.checks  # passes needed repeats
        found += answer.first_failing is not None and answer.first_failing.release == names[first_bad]
    assert found >= 15  # each pass needs enough runs that a miss is ~1 % per release


def test_newest_release_passing_once_then_failing_marks_the_check_flaky() -> None:
    search = ReleaseBisection(releases(3), flaky=True)
    search.record("1.12.0", PASS)
    assert search.next_release() == "1.12.0" and search.next_repeat() == 1
    search.record("1.12.0", FAIL)
    assert search.flaky and search.next_release() == "1.10.0"
    needed = repeats_needed(search.rate().for_sizing)
    for repeat in range(needed):
        assert search.next_release() == "1.10.0" and search.next_repeat() == repeat
        search.record("1.10.0", PASS)
    search.record("1.11.0", PASS)
    search.record("1.11.0", FAIL)
    answer = search.answer()
    assert answer.first_failing is not None and answer.first_failing.release == "1.11.0"
    assert answer.first_failing.runs == 2 and answer.first_failing.failures == 1
    assert answer.runs == 2 + needed + 2
    assert answer.flaky_message() is not None and "comes and goes" in str(answer.flaky_message())


def test_flaky_newest_release_that_never_fails_gives_up_after_the_original_repeats() -> None:
    search = ReleaseBisection(releases(3), flaky=True)
    assert run_search(search, lambda r: False) == ["1.12.0"] * (1 + ORIGINAL_REPEATS)
    assert search.answer().outcome is Outcome.NEWEST_PASSES


def test_replay_rebuilds_the_same_search() -> None:
    search = ReleaseBisection(releases(6), flaky=True)
    pattern = iter([True, False, True] + [False] * 40)
    while (release := search.next_release()) is not None:
        search.record(release, FAIL if release >= "1.13" and next(pattern) else PASS)
    again = replay(releases(6), search.runs, flaky=True)
    assert again.answer() == search.answer()


def test_infra_error_stops_the_search() -> None:
    search = ReleaseBisection(releases(3))
    with pytest.raises(ReleaseInfraError, match=r"1\.12\.0"):
        search.record("1.12.0", Verdict(VerdictKind.INFRA_ERROR, "", "no module named onnxruntime"))


def test_a_verdict_for_another_release_is_refused() -> None:
    search = ReleaseBisection(releases(3))
    with pytest.raises(ValueError, match=r"asked for 1\.12\.0"):
        search.record("1.10.0", FAIL)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (["1.20"], "at least two"),
        (["1.20", "1.20.0"], "given twice"),
        (["1.20", "latest"], "not a release version"),
    ],
)
def test_bad_release_lists(labels: list[str], message: str) -> None:
    with pytest.raises(ReleaseError, match=message):
        order_releases(labels)


def test_versions_order_numerically() -> None:
    assert order_releases(["1.20", "1.9", "1.20.1"]) == ("1.9", "1.20", "1.20.1")


def test_parse_release_envs() -> None:
    assert parse_release_envs(["1.20=/a/bin/python", " 1.21 = /b/bin/python "]) == {
        "1.20": "/a/bin/python",
        "1.21": "/b/bin/python",
    }
    with pytest.raises(ReleaseError, match="VERSION=PYTHON"):
        parse_release_envs(["/a/bin/python"])
    with pytest.raises(ReleaseError, match="given twice"):
        parse_release_envs(["1.20=/a", "1.20=/b"])

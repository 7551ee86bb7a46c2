"""Release bisection: which runtime release introduced a failure.

Given ``R`` releases of a runtime (``1.30.0``, ``1.31.0``, ...) in which the same model and check
can run, find the first release that fails and the last one before it that passes, like
``git bisect`` over releases (Hugging Face's CI bisects commits the same way).

The ends. The newest release is checked first: a bug report says "it breaks on the latest", and
when the newest passes there is nothing to bisect (one check, answer ``newest-passes``). The
oldest release is *not* assumed to pass: it is checked when the search gets there, so both
releases the answer names were run and their verdicts are linked. After the newest failed, the
first failing release is one of the ``R`` releases, and halving that range takes at most
``ceil(log2 R)`` more checks: at most ``ceil(log2 R) + 1`` release verdicts in all. When even the
oldest fails the answer says so (``all-fail``: no release given passes).

A release *fails* when its verdict reproduces the newest release's failure (``Verdict.reproduces``
with the given pinning: the same failure family by default); an infra-error (the check could not
run in that environment) stops the search (``ReleaseInfraError``).

Flaky checks (``reducer_core.flakiness``'s model: a failure is trusted, a pass is not once the
check is flaky). With ``flaky=True``, or as soon as one release both passed and failed, a
release counts as passing only after ``repeats_needed(rate)`` passing runs in a row; the first
failure settles it as failing. A passing newest release is run again up to ``ORIGINAL_REPEATS``
times when ``flaky=True`` (a flaky newest release that happened to pass). The rate is estimated
from every run of a release known to fail. Each run is one *verdict* with its ``repeat`` number;
the check bound above counts releases judged, the runs are reported beside it.

Everything here is a pure function of the runs recorded, in order (``replay``), so a service job
rebuilds the same search from its stored verdicts."""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from reducer_core.flakiness import ORIGINAL_REPEATS, FailureRate, repeats_needed
from reducer_core.verdict import Pinning, Verdict, VerdictKind


class ReleaseError(ValueError):
    """The releases given cannot be bisected (a label that is no version, a duplicate, too few)."""


class ReleaseInfraError(RuntimeError):
    """The check could not run in one release's environment (an infra-error verdict)."""

    def __init__(self, release: str, verdict: Verdict) -> None:
        super().__init__(
            f"The check could not run on onnxruntime {release}: {verdict.detail or verdict.signature}. "
            f"Check that this release's environment has what a check needs installed (docs/deployment.md)."
        )
        self.release = release
        self.verdict = verdict


def release_key(label: str) -> Version:
    """The ordering key of a release label (PEP 440: ``1.9`` < ``1.20`` < ``1.20.1``)."""
    try:
        return Version(label)
    except InvalidVersion:
        raise ReleaseError(f"'{label[:60]}' is not a release version; write it like 1.20 or 1.20.1") from None


def order_releases(labels: Iterable[str]) -> tuple[str, ...]:
    """The labels oldest first; a duplicate (``1.20`` and ``1.20.0`` are one release) or fewer than
    two releases is an error."""
    ordered = sorted(labels, key=release_key)
    for older, newer in itertools.pairwise(ordered):
        if release_key(older) == release_key(newer):
            raise ReleaseError(f"release {newer} is given twice ({older} and {newer}); give each release once")
    if len(ordered) < 2:
        raise ReleaseError(f"bisecting needs at least two releases, got {len(ordered)}")
    return tuple(ordered)


def max_release_checks(releases: int) -> int:
    """The most release verdicts a search over ``releases`` releases takes: ``ceil(log2 R) + 1``."""
    return math.ceil(math.log2(releases)) + 1 if releases > 1 else 1


@dataclass(frozen=True)
class Run:
    """One run of the check on one release (``repeat``: 0 for its first run)."""

    release: str
    repeat: int
    verdict: Verdict

    def to_json(self) -> dict[str, object]:
        return {"release": self.release, "repeat": self.repeat, "verdict": self.verdict.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        return cls(str(data["release"]), int(data["repeat"]), Verdict.from_json(dict(data["verdict"])))


@dataclass(frozen=True)
class ReleaseVerdict:
    """A release judged: ``fails`` and the verdict that settled it (the failure, or the last pass),
    after ``runs`` runs of which ``failures`` failed."""

    release: str
    fails: bool
    verdict: Verdict
    runs: int
    failures: int

    def to_json(self) -> dict[str, object]:
        return {
            "release": self.release,
            "fails": self.fails,
            "runs": self.runs,
            "failures": self.failures,
            "verdict": self.verdict.to_json(),
        }


class Outcome(enum.StrEnum):
    FOUND = "found"  # a passing release right before a failing one
    ALL_FAIL = "all-fail"  # even the oldest release fails
    NEWEST_PASSES = "newest-passes"  # nothing to bisect


@dataclass(frozen=True)
class ReleaseAnswer:
    outcome: Outcome
    releases: tuple[str, ...]
    first_failing: ReleaseVerdict | None
    last_passing: ReleaseVerdict | None
    judged: tuple[ReleaseVerdict, ...]  # in the order they were settled
    runs: int
    flaky: bool
    rate: FailureRate

    @property
    def checks(self) -> int:
        """Releases judged (the bound ``max_release_checks`` is about these)."""
        return len(self.judged)

    def message(self) -> str:
        if self.outcome is Outcome.NEWEST_PASSES:
            return f"The newest release, {self.releases[-1]}, passes: there is no failure to bisect."
        assert self.first_failing is not None
        if self.outcome is Outcome.ALL_FAIL:
            return f"Every release fails, the oldest given ({self.first_failing.release}) too: give older releases."
        assert self.last_passing is not None
        return (
            f"First failing release: {self.first_failing.release}; last passing release: {self.last_passing.release}."
        )

    def flaky_message(self) -> str | None:
        if not self.flaky:
            return None
        return (
            f"The failure comes and goes between runs: it failed ~{self.rate.percent} % of the runs of failing "
            f"releases; each pass counts after {repeats_needed(self.rate.for_sizing)} passing runs in a row."
        )

    def strip(self) -> list[dict[str, object]]:
        """Every release in order with ``pass``/``fail``/``unknown`` (not run): the page's strip."""
        settled = {v.release: v for v in self.judged}
        strip: list[dict[str, object]] = []
        for release in self.releases:
            verdict = settled.get(release)
            state = "unknown" if verdict is None else ("fail" if verdict.fails else "pass")
            strip.append({"release": release, "state": state})
        return strip

    def to_json(self) -> dict[str, object]:
        return {
            "outcome": self.outcome.value,
            "message": self.message(),
            "first_failing": self.first_failing.release if self.first_failing else None,
            "last_passing": self.last_passing.release if self.last_passing else None,
            "first_failing_verdict": self.first_failing.to_json() if self.first_failing else None,
            "last_passing_verdict": self.last_passing.to_json() if self.last_passing else None,
            "releases": list(self.releases),
            "strip": self.strip(),
            "judged": [v.to_json() for v in self.judged],
            "checks": self.checks,
            "max_checks": max_release_checks(len(self.releases)),
            "runs": self.runs,
            "flaky": self.flaky,
            "failure_rate": {"failures": self.rate.failures, "runs": self.rate.runs} if self.flaky else None,
            "flaky_message": self.flaky_message(),
        }


@dataclass
class _Pending:
    """The release being run now and its runs so far."""

    release: str
    passes_in_row: int = 0
    runs: list[Run] = field(default_factory=list)


class ReleaseBisection:
    """The search (module doc): ask ``next_release()`` which release to run, ``record()`` its
    verdict, until ``done``; then ``answer()``."""

    def __init__(self, releases: Iterable[str], flaky: bool = False, pinned: bool | Pinning = True) -> None:
        self.releases = order_releases(releases)
        self.pinned = pinned
        self.flaky = flaky  # passes need repeats (set on when a release both passed and failed)
        self.reference: Verdict | None = None  # the newest release's failure
        self.runs: list[Run] = []
        self.judged: list[ReleaseVerdict] = []
        self._lo = -1  # index of the newest release known to pass below the failing range
        self._hi = len(self.releases) - 1  # index of the oldest release known to fail
        self._pending: _Pending | None = _Pending(self.releases[-1])
        self._outcome: Outcome | None = None
        self._assumed_flaky = flaky

    @property
    def done(self) -> bool:
        return self._outcome is not None

    def next_release(self) -> str | None:
        """The release whose check runs next (again, for a repeat), or None when done."""
        return None if self._pending is None else self._pending.release

    def next_repeat(self) -> int:
        """The ``repeat`` number the next run gets (0: the release's first run)."""
        return 0 if self._pending is None else len(self._pending.runs)

    def record(self, release: str, verdict: Verdict) -> None:
        pending = self._pending
        if pending is None or release != pending.release:
            raise ValueError(f"recorded a verdict for {release}, but the search asked for {self.next_release()}")
        if verdict.kind is VerdictKind.INFRA_ERROR:
            raise ReleaseInfraError(release, verdict)
        run = Run(release, len(pending.runs), verdict)
        pending.runs.append(run)
        self.runs.append(run)
        if self.counts_as_failing(verdict):
            if self.reference is None:
                self.reference = verdict
            if pending.passes_in_row:
                self.flaky = True  # the same release passed, then failed
            self._settle(pending, fails=True, verdict=verdict)
            return
        pending.passes_in_row += 1
        if pending.passes_in_row >= self._passes_needed(pending):
            self._settle(pending, fails=False, verdict=verdict)

    def counts_as_failing(self, verdict: Verdict) -> bool:
        """``verdict`` is the failure bisected (the newest release's, as pinned; any failure before it)."""
        if self.reference is None:
            return verdict.is_failure
        return verdict.reproduces(self.reference, self.pinned)

    def _passes_needed(self, pending: _Pending) -> int:
        newest = pending.release == self.releases[-1] and self.reference is None
        if newest:
            return 1 + ORIGINAL_REPEATS if self._assumed_flaky else 1
        return repeats_needed(self.rate().for_sizing) if self.flaky else 1

    def rate(self) -> FailureRate:
        """Failures among the runs of releases that failed at least once."""
        failing = {run.release for run in self.runs if self.counts_as_failing(run.verdict)}
        held = [run for run in self.runs if run.release in failing]
        return FailureRate(sum(1 for run in held if self.counts_as_failing(run.verdict)), len(held))

    def _settle(self, pending: _Pending, fails: bool, verdict: Verdict) -> None:
        failures = sum(1 for run in pending.runs if self.counts_as_failing(run.verdict))
        self.judged.append(ReleaseVerdict(pending.release, fails, verdict, len(pending.runs), failures))
        index = self.releases.index(pending.release)
        if index == len(self.releases) - 1 and not fails:
            self._finish(Outcome.NEWEST_PASSES)
            return
        if fails:
            self._hi = index
        else:
            self._lo = index
        if self._hi - self._lo <= 1:
            self._finish(Outcome.FOUND if self._lo >= 0 else Outcome.ALL_FAIL)
            return
        self._pending = _Pending(self.releases[(self._lo + self._hi) // 2])

    def _finish(self, outcome: Outcome) -> None:
        self._outcome = outcome
        self._pending = None

    def answer(self) -> ReleaseAnswer:
        if self._outcome is None:
            raise ValueError("the search is not done: run next_release() until it returns None")
        settled = {v.release: v for v in self.judged}
        found = self._outcome is not Outcome.NEWEST_PASSES
        return ReleaseAnswer(
            outcome=self._outcome,
            releases=self.releases,
            first_failing=settled[self.releases[self._hi]] if found else None,
            last_passing=settled[self.releases[self._lo]] if found and self._lo >= 0 else None,
            judged=tuple(self.judged),
            runs=len(self.runs),
            flaky=self.flaky,
            rate=self.rate(),
        )


def replay(
    releases: Iterable[str], runs: Sequence[Run], flaky: bool = False, pinned: bool | Pinning = True
) -> ReleaseBisection:
    """The search rebuilt from its recorded runs, in order (a resumed service job)."""
    search = ReleaseBisection(releases, flaky, pinned)
    for run in runs:
        search.record(run.release, run.verdict)
    return search


def parse_release_envs(items: Iterable[str], what: str = "--runtime-env") -> dict[str, str]:
    """``VERSION=PATH`` items (``1.20=/opt/ort120/bin/python``) as ``{version: path}``; a malformed
    item is a ``ReleaseError`` naming it and the form to use."""
    found: dict[str, str] = {}
    for item in items:
        version, sep, path = item.strip().partition("=")
        version, path = version.strip(), path.strip()
        if not sep or not version or not path:
            raise ReleaseError(
                f"{what} '{item[:80]}': write VERSION=PYTHON, e.g. 1.20=/opt/ort-1.20/bin/python "
                "(the python of an environment with that onnxruntime release installed)"
            )
        release_key(version)
        if version in found:
            raise ReleaseError(f"{what}: release {version} is given twice; give each release once")
        found[version] = path
    return found


def split_release_envs(text: str) -> list[str]:
    """``RUNTIME_ENVS``: comma-separated ``VERSION=PATH`` items (empty: none)."""
    return [part for part in text.split(",") if part.strip()]


def env_for(envs: Mapping[str, str], release: str) -> str:
    """The environment of ``release`` among ``envs`` (``1.20`` finds ``1.20.0``'s)."""
    key = release_key(release)
    for version, path in envs.items():
        if release_key(version) == key:
            return path
    raise KeyError(release)

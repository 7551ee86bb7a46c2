"""Flaky checks: evidence that a check fails only some of the time, the estimated failure rate,
and how many passing runs in a row make a candidate count as passing.

The model: a check that fails on a candidate holding the failure does so with some rate ``p``
(a race in a kernel, a nondeterministic TensorRT tactic), and never fails on one without it. A
failure is therefore trusted; a pass is not, once the check is known to be flaky.

Evidence of flakiness is an inconsistency between verdicts:

- a candidate *contains* a known failing candidate but passed (``contains-failing``): a
  deterministic, monotone check cannot do that;
- the same candidate gave different verdicts on a repeat (``repeat-differs``).

A ``contains-failing`` inconsistency is only a suspicion (a check that is not monotone does the
same every time): the session re-checks the passing candidate up to ``PROBE_BUDGET`` times. A
failure among those runs confirms the flakiness; passes every time mean the check is repeatable
(deterministic but not monotone), and after ``MAX_PROBES`` such refutations no more probes run, so
a deterministic check pays at most ``PROBE_BUDGET * MAX_PROBES`` extra checks, and a monotone
deterministic check none.

The failure rate is estimated from every run of a candidate known to contain the failure (it
contains, or is, a candidate that failed): failures / runs. Once flaky, a candidate passes only
after ``repeats_needed(rate)`` passing runs in a row, enough that a candidate holding the failure
passes them all with a chance of at most ``MISS_CHANCE``.

Everything here is a pure function of the verdicts recorded, in order, so a replayed session
rebuilds the same tracker.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from reducer_core.candidate import Candidate

MISS_CHANCE = 0.01
"""The chance, at the estimated rate, that a candidate holding the failure passes every repeat."""
PROBE_BUDGET = 3
"""Re-checks of a passing candidate that contains a failing one, before calling it repeatable."""
MAX_PROBES = 2
"""Inconsistencies probed before the check is taken as deterministic (not monotone)."""
CONFIRM_LIMIT = 3
"""Answers of 2 to this many nodes with no inconsistency seen get each passing candidate inside
them (what made them look minimal) re-checked once: a flaky single culprit often ends there."""
ORIGINAL_REPEATS = 3
"""Runs of a passing original beyond its first (with ``confirm_flaky``), before the session gives
up on it: a check failing 70 % of the time passes all four with a chance of 0.8 %."""
MIN_RATE = 0.1
"""The lowest rate repeats are sized for (a lower estimate would ask for dozens of repeats)."""


class Status(enum.StrEnum):
    UNKNOWN = "unknown"  # no inconsistency seen (what a deterministic, monotone check stays)
    FLAKY = "flaky"  # a candidate failed on a repeat after passing
    REPEATABLE = "repeatable"  # inconsistencies repeat exactly: deterministic, not monotone


@dataclass(frozen=True)
class Evidence:
    """``passing`` passed although it contains ``failing`` (``contains-failing``), or ``passing``
    and ``failing`` are the same candidate that both passed and failed (``repeat-differs``)."""

    kind: str
    passing: Candidate
    failing: Candidate

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "passing_nodes": len(self.passing),
            "failing_nodes": len(self.failing),
            "passing": self.passing.fingerprint,
            "failing": self.failing.fingerprint,
        }


@dataclass(frozen=True)
class FailureRate:
    """Runs of candidates known to hold the failure, and how many of them failed."""

    failures: int
    runs: int

    @property
    def estimate(self) -> float:
        return self.failures / self.runs if self.runs else 1.0

    @property
    def percent(self) -> int:
        return round(100 * self.estimate)

    @property
    def for_sizing(self) -> float:
        """A cautious rate for sizing repeats: the estimate shrunk towards one half by a uniform
        prior ((failures + 1) / (runs + 2)), so that a few lucky failures early on do not ask for
        too few repeats."""
        return (self.failures + 1) / (self.runs + 2)


def repeats_needed(rate: float, miss: float = MISS_CHANCE) -> int:
    """Passing runs in a row after which a candidate counts as passing: the fewest ``n`` with
    ``(1 - rate) ** n <= miss`` (1 for a check that always fails on the failure)."""
    if not 0.0 < miss < 1.0:
        raise ValueError("miss must be between 0 and 1")
    rate = min(max(rate, MIN_RATE), 1.0)
    if rate >= 1.0:
        return 1
    return max(1, math.ceil(math.log(miss) / math.log(1.0 - rate) - 1e-9))


@dataclass(frozen=True)
class FlakinessReport:
    """What a finished (or running) session knows: the driver prints and saves it."""

    status: Status
    rate: FailureRate
    evidence: tuple[Evidence, ...]
    repeats: int  # passing runs in a row a candidate needs, at the end
    rechecks: int  # checks beyond the first of each candidate

    @property
    def flaky(self) -> bool:
        return self.status is Status.FLAKY

    def message(self, runtime: str = "") -> str:
        """``runtime``: the check's target runtime; a flaky TensorRT check is said to be the build
        (TensorRT picks its tactics anew on each engine build: the accuracy flowchart's first branch)."""
        if self.flaky and runtime == "tensorrt":
            return (
                f"flaky: the failure comes and goes between builds: fails ~{self.rate.percent} % of builds "
                f"({self.rate.failures}/{self.rate.runs} builds of candidates holding the failure; {self.rechecks} "
                f"re-checks; a pass needs {self.repeats} passing builds in a row). TensorRT picks tactics anew on "
                "each build: find the builder flag or tactic source with onnx-reducer bisect-passes"
            )
        if self.flaky:
            return (
                f"flaky: fails ~{self.rate.percent} % of runs ({self.rate.failures}/{self.rate.runs} runs of "
                f"candidates holding the failure; {self.rechecks} re-checks; a pass needs {self.repeats} "
                "passing runs in a row)"
            )
        return (
            f"the check is deterministic: {len(self.evidence)} verdict(s) that looked inconsistent with their "
            "neighbours gave the same answer when checked again (usual for compare checks, whose error on a "
            "subgraph differs from the full model's); the reduction goes on as usual"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "status": self.status.value,
            "fails_percent": self.rate.percent if self.flaky else None,
            "failures": self.rate.failures,
            "runs": self.rate.runs,
            "repeats": self.repeats,
            "rechecks": self.rechecks,
            "evidence": [e.to_json() for e in self.evidence],
        }


class FlakinessTracker:
    """Verdicts per candidate and run (``repeat``), the inconsistencies among them and the rate.

    ``record`` is idempotent per (candidate, repeat): a cached verdict seen again adds nothing."""

    def __init__(self) -> None:
        self._runs: dict[str, dict[int, bool]] = {}  # fingerprint -> repeat -> reproduced
        self._clean: dict[str, bool] = {}  # fingerprint -> every non-reproducing run was a clean pass
        self._candidates: dict[str, Candidate] = {}
        self._failing: dict[str, Candidate] = {}
        self._passing: dict[str, Candidate] = {}  # clean passes that never failed
        self.evidence: list[Evidence] = []
        self.status = Status.UNKNOWN
        self.refuted = 0
        self._rate: FailureRate | None = None  # computed once per new run recorded

    # -- recording -------------------------------------------------------------------------------

    def runs(self, candidate: Candidate) -> int:
        """Runs recorded for ``candidate``: the repeat index of its next run."""
        return len(self._runs.get(candidate.fingerprint, {}))

    def record(self, candidate: Candidate, repeat: int, reproduced: bool, clean_pass: bool) -> Evidence | None:
        """Take one run in; returns a *new* inconsistency worth probing (None when there is
        none, when it was seen before, or once the status is settled)."""
        key = candidate.fingerprint
        runs = self._runs.setdefault(key, {})
        if repeat in runs:
            return None
        runs[repeat] = reproduced
        self._rate = None
        self._candidates[key] = candidate
        self._clean[key] = self._clean.get(key, True) and (reproduced or clean_pass)
        if reproduced:
            return self._took_failure(candidate)
        if clean_pass and key not in self._failing:
            self._passing[key] = candidate
            return self._suspect_pass(candidate)
        return None

    def _took_failure(self, candidate: Candidate) -> Evidence | None:
        key = candidate.fingerprint
        self._failing[key] = candidate
        if self._passing.pop(key, None) is not None:
            evidence = Evidence("repeat-differs", candidate, candidate)
            self.evidence.append(evidence)
            self.status = Status.FLAKY
            return None  # confirmed: nothing left to probe
        passing = next((p for p in self._passing.values() if candidate.nodes <= p.nodes), None)
        return self._suspect(passing, candidate) if passing is not None else None

    def _suspect_pass(self, candidate: Candidate) -> Evidence | None:
        failing = next((f for f in self._failing.values() if f.nodes <= candidate.nodes), None)
        return self._suspect(candidate, failing) if failing is not None else None

    def _suspect(self, passing: Candidate, failing: Candidate) -> Evidence | None:
        if self.status is not Status.UNKNOWN:
            return None
        evidence = Evidence("contains-failing", passing, failing)
        self.evidence.append(evidence)
        return evidence

    def refute(self) -> None:
        """A probed inconsistency repeated exactly; after ``MAX_PROBES`` the check is repeatable."""
        self.refuted += 1
        if self.refuted >= MAX_PROBES and self.status is Status.UNKNOWN:
            self.status = Status.REPEATABLE

    # -- what is known ---------------------------------------------------------------------------

    @property
    def flaky(self) -> bool:
        return self.status is Status.FLAKY

    def rate(self) -> FailureRate:
        """Failures / runs over the candidates that contain (or are) a failing candidate."""
        if self._rate is None:
            self._rate = self._count_rate()
        return self._rate

    def _count_rate(self) -> FailureRate:
        failing = [f.nodes for f in self._failing.values()]
        failures = runs = 0
        for key, outcomes in self._runs.items():
            nodes = self._candidates[key].nodes
            if key in self._failing or any(f <= nodes for f in failing):
                failures += sum(outcomes.values())
                runs += len(outcomes)
        return FailureRate(failures, runs)

    def repeats(self) -> int:
        return repeats_needed(self.rate().for_sizing)

    def settled(self, candidate: Candidate) -> tuple[bool, bool] | None:
        """The observation ``(reproduces, clean pass)`` to give the strategy, or None while a
        flaky check needs more passing runs of ``candidate``. Any failing run reproduces."""
        key = candidate.fingerprint
        outcomes = self._runs.get(key, {})
        if any(outcomes.values()):
            return True, False
        if self.flaky and len(outcomes) < self.repeats():
            return None
        return False, self._clean.get(key, True)

    def passing_inside(self, candidate: Candidate) -> list[Candidate]:
        """Candidates inside ``candidate`` that passed their one run, largest first: what makes
        a small answer look minimal (``CONFIRM_LIMIT``)."""
        inside = [p for key, p in self._passing.items() if p.nodes < candidate.nodes and len(self._runs[key]) == 1]
        return sorted(inside, key=lambda p: (-len(p), sorted(p.nodes)))

    def smallest_failing(self, fallback: Candidate) -> Candidate:
        """The smallest candidate that failed (``fallback`` when none is smaller)."""
        smaller = [f for f in self._failing.values() if len(f) < len(fallback)]
        return min(smaller, key=lambda f: (len(f), sorted(f.nodes))) if smaller else fallback

    def report(self) -> FlakinessReport | None:
        """None while nothing was inconsistent (the common case: no flakiness section at all)."""
        if not self.evidence:
            return None
        rechecks = sum(len(outcomes) - 1 for outcomes in self._runs.values())
        return FlakinessReport(self.status, self.rate(), tuple(self.evidence), self.repeats(), rechecks)

"""What a reduction reports: one record per verdict, the localisation outcome and the final result."""

from __future__ import annotations

from dataclasses import dataclass, field

from reducer_core.candidate import Candidate
from reducer_core.flakiness import FlakinessReport
from reducer_core.verdict import Goal, Verdict


@dataclass(frozen=True)
class IterationRecord:
    """One verdict of a reduction, in the order they were seen. ``number`` is the number its check
    request was handed out with (a cached verdict carries the number of the last check that ran);
    ``iteration``: the record's own number, 1, 2, 3... in recording order, cached records included
    (no gap: a request never answered takes none). ``source``: where a cached verdict came from
    (``job``: the session's own verdicts, ``farm``: verdicts seeded from other sessions)."""

    number: int
    phase: str
    candidate: Candidate
    verdict: Verdict
    reproduces: bool
    cached: bool
    best_size: int
    overhead_s: float = 0.0
    iteration: int = 0
    source: str = ""


@dataclass(frozen=True)
class Localization:
    """How the accuracy flowchart went: ``path`` is "layerwise" (it found the failing node) or
    "reduction" (the strategy reduces instead, for ``reason``)."""

    path: str
    reason: str
    checks: int  # layerwise runs + candidate checks spent on it
    candidate: Candidate | None = None
    tensor: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "reason": self.reason,
            "checks": self.checks,
            "tensor": self.tensor,
            "nodes": sorted(self.candidate.nodes) if self.candidate is not None else None,
        }


@dataclass
class ReductionResult:
    original: Verdict
    nodes_before: int
    min_bad: Candidate
    min_good: Candidate | None
    iterations: list[IterationRecord] = field(default_factory=list)
    checks_run: int = 0
    cache_hits: int = 0
    elapsed_s: float = 0.0
    stopped_early: bool = False
    localization: Localization | None = None
    flakiness: FlakinessReport | None = None  # None: no inconsistent verdicts were seen
    goal: Goal = Goal.FAILURE
    min_bad_size: int | None = None  # min_bad's nodes in and out of Loop/If bodies (None: len(min_bad))

    @property
    def nodes_after(self) -> int:
        """The min-bad model's nodes, counted like ``nodes_before`` (body nodes included)."""
        return len(self.min_bad) if self.min_bad_size is None else self.min_bad_size

    @property
    def pinned_out(self) -> int:
        """Distinct candidates whose verdict signature pinning changed: they failed, but not like
        the original, so they did not count (``Verdict.changed_by_pinning``). None for
        ``Goal.PASS``, where only a pass counts."""
        if self.goal is Goal.PASS:
            return 0
        changed = {
            r.candidate.fingerprint
            for r in self.iterations
            if r.phase != "original" and r.verdict.changed_by_pinning(self.original, r.reproduces)
        }
        return len(changed)

    @property
    def check_time_s(self) -> float:
        """Time spent in checks that ran (the original's included; cached verdicts cost none)."""
        return sum(r.verdict.duration_s for r in self.iterations if not r.cached)

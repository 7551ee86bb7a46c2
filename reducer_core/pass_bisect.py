"""Pass bisection: which runtime transformation brings a failure in (``onnx-reducer bisect-passes``).

The candidates are what the target runtime actually did to this model (for onnxruntime the graph
transformers that changed it at the check's level, for TensorRT the builder flags and tactic
sources of the build: ``checks.pass_candidates``). The search finds the smallest set of them
whose *disabling* makes the failure vanish, like PyTorch's ``CompilerBisector`` over its passes.

The probes, each one real check run (``engine.pass_bisect`` runs them):
1. ``no-optimizer``: the check with every candidate disabled (nothing the runtime did to this
   model is done). When the failure is still there it needs no optimizer: one check.
2. ``bisect``: halving for the single optimizer a fusion bug usually is: disable one half; when
   the failure vanishes the culprit is in that half, else in the other. ``ceil(log2 P)`` checks.
   The first failing probe pins the failure (its verdict is the one the others must reproduce).
3. ``verify``: exactly the answer disabled, the rest on: the check must pass. The halving's last
   probe is that check when it passed; only a halving that ended on a failing probe runs it.
   When it does not pass, ``ddmin`` over all candidates (Zeller's delta debugging) finds a
   1-minimal set (several optimizers that bring the failure in together).
4. ``all-on``: the check as the spec gives it, run only when no probe with the answer's
   optimizers on has failed yet (every halving probe passed): the other way of the verification,
   and the no-failure answer when it passes too.

A halving that saw a failing probe needs no all-on check (that probe had the culprit on and
failed), and one that saw none ended on exactly the culprit disabled (its verification), so
the two extra checks never both run: a single culprit among ``P`` candidates is named and
verified both ways (disabled: passes; on: fails) in at most ``ceil(log2 P) + 2`` checks in all,
the no-optimizer check included. Fewer cannot do it: the no-optimizer check tells nothing about
which candidate it is, and a search whose every answer ends in a passing probe of exactly that
candidate disabled tells apart at most ``2^(k-1)`` candidates in ``k`` probes (a probe of one
candidate alone separates only that one).

A probe *fails* when its verdict reproduces the pinned one (``Verdict.reproduces``, by failure
family unless pinned strictly)."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reducer_core.strategies.minimize import even_chunks

ORT_LEVELS = ("disable", "basic", "extended", "all")  # the order they include each other
LEVEL_OF_OPTIMIZATION = {"none": "disable", "basic": "basic", "extended": "extended", "all": "all"}


class Outcome(enum.StrEnum):
    OPTIMIZERS = "optimizers"  # the answer names the optimizers to disable
    NO_OPTIMIZER = "no-optimizer"  # it fails with nothing optimized
    NO_FAILURE = "no-failure"  # the check passes with everything on: nothing to bisect
    UNRESOLVED = "unresolved"  # no set of candidates made the failure vanish


@dataclass(frozen=True)
class PassCandidate:
    """One thing the bisection may turn off: its name (as the spec's disabled list takes it) and
    the onnxruntime level it belongs to (``ORT_LEVELS``) or, for TensorRT, ``flag``/``tactic``."""

    name: str
    level: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "level": self.level}


@dataclass(frozen=True)
class ProbeRecord:
    """One check of the search: what was disabled (or the level it ran at), and what it said."""

    role: str  # no-optimizer | bisect | verify | all-on | ddmin
    disabled: tuple[str, ...]
    level: str
    verdict: str  # the verdict kind
    signature: str
    reproduces: bool  # the pinned failure (the first failing probe pins it)
    detail: str = ""
    duration_s: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "role": self.role,
            "disabled": list(self.disabled),
            "level": self.level,
            "verdict": self.verdict,
            "signature": self.signature,
            "reproduces": self.reproduces,
            "detail": self.detail,
            "duration_s": round(self.duration_s, 3),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeRecord:
        """The probe ``to_json`` wrote (a job's stored probes)."""
        return cls(
            str(data["role"]),
            tuple(str(name) for name in data["disabled"]),
            str(data["level"]),
            str(data["verdict"]),
            str(data["signature"]),
            bool(data["reproduces"]),
            str(data.get("detail", "")),
            float(data.get("duration_s", 0.0)),
        )


@dataclass
class PassAnswer:
    """The answer of a pass bisection (``--summary-json``, ``GET /v1/jobs/{id}``'s ``passes``)."""

    runtime: str
    level: str  # the check's own level (onnxruntime), or "" (TensorRT)
    outcome: Outcome
    optimizers: list[str] = field(default_factory=list)
    first_failing_level: str | None = None
    candidates: list[PassCandidate] = field(default_factory=list)
    probes: list[ProbeRecord] = field(default_factory=list)
    verified: bool = False
    pinned_signature: str = ""
    flaky_note: str = ""

    @property
    def checks(self) -> int:
        return len(self.probes)

    @property
    def check_bound(self) -> int:
        """``ceil(log2 P) + 2``, the no-optimizer check included: the single-culprit budget."""
        return halving_steps(len(self.candidates)) + 2

    def message(self) -> str:
        return answer_message(self)

    def to_json(self) -> dict[str, object]:
        return {
            "runtime": self.runtime,
            "level": self.level,
            "outcome": self.outcome.value,
            "optimizers": list(self.optimizers),
            "first_failing_level": self.first_failing_level,
            "verified": self.verified,
            "pinned_signature": self.pinned_signature,
            "candidates": [c.to_json() for c in self.candidates],
            "checks": self.checks,
            "check_bound": self.check_bound,
            "probes": [p.to_json() for p in self.probes],
            "flaky_note": self.flaky_note,
            "message": self.message(),
        }


def halving_steps(count: int) -> int:
    return math.ceil(math.log2(count)) if count > 1 else 0


Probe = Callable[[frozenset[str], str], bool]  # (disabled, role) -> the pinned failure is there


@dataclass(frozen=True)
class SearchResult:
    """What ``search_candidates`` concluded: the outcome, the optimizers to disable (outcome
    ``OPTIMIZERS``), and whether both ways of the answer were seen (disabled: it passed; on: some
    probe with all of them on failed)."""

    outcome: Outcome
    optimizers: list[str] = field(default_factory=list)
    verified: bool = False


class _Probes:
    """The search's probes, each set run at most once (cached), in the order asked."""

    def __init__(self, fails: Probe) -> None:
        self.fails = fails
        self.seen: dict[frozenset[str], bool] = {}  # disabled -> still fails

    def still_fails(self, disabled: Sequence[str], role: str) -> bool:
        key = frozenset(disabled)
        if key not in self.seen:
            self.seen[key] = self.fails(key, role)
        return self.seen[key]

    def failed_with_all_on(self, found: Sequence[str]) -> bool:
        """A probe with none of ``found`` disabled failed: they on, the failure is there."""
        return any(failed and not disabled & set(found) for disabled, failed in self.seen.items())


def search_candidates(candidates: Sequence[str], fails: Probe) -> SearchResult:
    """The whole search over ``candidates`` (the module's docstring): the no-optimizer probe, the
    halving, the verification (``ddmin`` when a single one is not the answer) and the all-on
    probe when still needed. ``fails(disabled, role)`` runs one check."""
    probes = _Probes(fails)
    if probes.still_fails(candidates, "no-optimizer"):
        return SearchResult(Outcome.NO_OPTIMIZER)
    pool = list(candidates)
    if not pool:  # nothing to disable, and the check with nothing disabled passed
        return SearchResult(Outcome.NO_FAILURE)
    while len(pool) > 1:
        half = pool[: len(pool) // 2]
        pool = pool[len(half) :] if probes.still_fails(half, "bisect") else half
    found = pool
    if probes.still_fails(found, "verify"):
        found = ddmin(list(candidates), lambda disabled: not probes.still_fails(disabled, "ddmin"))
    if not probes.failed_with_all_on(found) and not probes.still_fails((), "all-on"):
        if not any(probes.seen.values()):
            return SearchResult(Outcome.NO_FAILURE)
        return SearchResult(Outcome.OPTIMIZERS, found, verified=False)
    return SearchResult(Outcome.OPTIMIZERS, found, verified=not probes.seen[frozenset(found)])


def smallest_disabling_set(candidates: Sequence[str], fails: Probe) -> list[str] | None:
    """The optimizers ``search_candidates`` names, or None when it names none."""
    result = search_candidates(candidates, fails)
    return result.optimizers if result.outcome is Outcome.OPTIMIZERS else None


T = TypeVar("T")


def ddmin(items: list[T], interesting: Callable[[Sequence[T]], bool]) -> list[T]:
    """Zeller's ddmin: a 1-minimal subset of ``items`` (``interesting(items)`` holds) for which
    ``interesting`` holds (no single item can be left out)."""
    granularity = 2
    while len(items) >= 2:
        chunks = even_chunks(items, granularity)
        reduced = next((c for c in chunks if interesting(c)), None)
        if reduced is not None:
            items, granularity = reduced, 2
            continue
        complements = ([i for i in items if i not in chunk] for chunk in chunks)
        reduced = next((c for c in complements if interesting(c)), None) if granularity > 2 else None
        if reduced is not None:
            items, granularity = reduced, max(granularity - 1, 2)
            continue
        if granularity >= len(items):
            break
        granularity = min(granularity * 2, len(items))
    return items


def first_failing_level(found: Sequence[str], candidates: Sequence[PassCandidate]) -> str | None:
    """The lowest onnxruntime level at which every optimizer of ``found`` runs (the highest of
    their levels); None for TensorRT's flags and tactics."""
    levels = {c.name: c.level for c in candidates}
    named = [levels.get(name, "") for name in found]
    if not named or any(level not in ORT_LEVELS for level in named):
        return None
    return max(named, key=ORT_LEVELS.index)


def flaky_builds_note(failed: int, runs: int, runtime: str) -> str:
    """The flowchart's first branch: a check that fails on some builds of the same model only is
    flaky (the build, e.g. TensorRT's tactic choice, decides). "" when every run agreed."""
    if runs < 2 or failed in (0, runs):
        return ""
    note = (
        f"the failure comes and goes between builds: fails ~{round(100 * failed / runs)} % of builds ({failed}/{runs})"
    )
    if runtime == "tensorrt":
        note += (
            "; TensorRT picks tactics anew on each build: bisect its builder flags and tactic sources "
            "(onnx-reducer bisect-passes) with a repeat high enough to see the failure"
        )
    return note


def answer_message(answer: PassAnswer) -> str:
    """One paragraph for the command line, the page and the bundle's repro.py."""
    where = f"{answer.runtime} at level {answer.level}" if answer.level else answer.runtime
    counted = f"{answer.checks} {'check' if answer.checks == 1 else 'checks'} over {len(answer.candidates)} candidates"
    if answer.outcome is Outcome.NO_OPTIMIZER:
        text = (
            "The failure needs no optimizer: the check fails with every optimizer that changed the model "
            f"disabled ({counted})."
        )
    elif answer.outcome is Outcome.NO_FAILURE:
        text = f"The check passes on {where} with every optimizer on: nothing to bisect ({counted})."
    elif answer.outcome is Outcome.UNRESOLVED:
        text = (
            f"The failure needs optimizations on {where}, but disabling the {len(answer.candidates)} optimizers "
            f"that changed the model did not make it vanish ({counted})."
        )
    else:
        names = ", ".join(answer.optimizers)
        level = f"; it first appears at level {answer.first_failing_level}" if answer.first_failing_level else ""
        verified = (
            "verified both ways: with them disabled the check passes, with them on it fails"
            if answer.verified
            else "NOT verified both ways: no check passed with them disabled and failed with them on"
        )
        text = f"Disable {names} on {where} and the failure vanishes{level} ({verified}; {counted})."
    return f"{text} {answer.flaky_note}." if answer.flaky_note else text

"""Run a pass bisection (``reducer_core.pass_bisect``) with real checks: every probe is the spec's
check, built by ``checks.build.build_check`` and run in its isolated child at the check's own
level, with the target's ``disabled_optimizers`` (onnxruntime) or ``disabled_build_options``
(TensorRT) set (every candidate for the no-optimizer probe). The candidates come from one build
of the model (``checks.pass_candidates.find_candidates``), before any check; that build is no
check (nothing is run)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from checks.build import build_check
from checks.isolated import RepeatedCheck
from checks.pass_candidates import CandidateError, bisected_runtime, find_candidates
from checks.spec import CheckSpec, CheckSpecError, ModelCheck, RuntimeSpec
from reducer_core.errors import UsageError
from reducer_core.pass_bisect import (
    LEVEL_OF_OPTIMIZATION,
    Outcome,
    PassAnswer,
    PassCandidate,
    ProbeRecord,
    first_failing_level,
    flaky_builds_note,
    search_candidates,
)
from reducer_core.verdict import Pinning, Verdict, VerdictKind

ProbeListener = Callable[[ProbeRecord], None]
CheckBuilder = Callable[[CheckSpec], ModelCheck]  # the service's: ``worker.checking.job_check``


class PassBisectError(UsageError):
    """The bisection cannot run: a check that could not run (infra-error), a spec without target."""


@dataclasses.dataclass
class PassBisection:
    """The search over one model. ``on_probe`` hears each probe as it ends (progress, events);
    ``build`` makes each probe's check (default: ``checks.build.build_check`` with ``golden``)."""

    spec: CheckSpec
    model: Path
    golden: Path | None = None
    pinning: Pinning = Pinning.KIND
    allow_command: bool = True
    on_probe: ProbeListener | None = None
    work_dir: Path | None = None
    build: CheckBuilder | None = None
    replayed: Sequence[ProbeRecord] = ()  # probes an earlier run of this search stored (a worker that died)

    def __post_init__(self) -> None:
        try:
            self.target = bisected_runtime(self.spec)
        except ValueError as exc:
            raise PassBisectError(f"--check-spec: {exc}") from exc
        self.answer = PassAnswer(self.target.runtime, self._level_name(), Outcome.UNRESOLVED)
        self.pinned: Verdict | None = None
        self.replayed_until: list[ProbeRecord] = []  # the stored probes this run took, in order

    def _level_name(self) -> str:
        return LEVEL_OF_OPTIMIZATION[self.target.optimization] if self.target.runtime == "onnxruntime" else ""

    def run(self) -> PassAnswer:
        answer = self.answer
        try:
            answer.candidates = find_candidates(self.spec, self.model)
        except CandidateError as exc:
            raise PassBisectError(str(exc)) from exc
        result = search_candidates([c.name for c in answer.candidates], self._fails)
        answer.optimizers = list(result.optimizers)
        answer.verified = result.verified
        answer.first_failing_level = first_failing_level(result.optimizers, answer.candidates)
        return self._done(result.outcome)

    # --- probes ------------------------------------------------------------------------------

    def _fails(self, disabled: frozenset[str], role: str) -> bool:
        """The probe reproduces the pinned failure (the first failing probe pins it)."""
        verdict = self._probe(role, tuple(sorted(disabled)))
        return verdict.is_failure and self.pinned is not None and verdict.reproduces(self.pinned, self.pinning)

    def _probe(self, role: str, disabled: tuple[str, ...]) -> Verdict:
        runtime = self._runtime(disabled)
        level = LEVEL_OF_OPTIMIZATION[runtime.optimization] if runtime.runtime == "onnxruntime" else ""
        stored = self._stored_probe(role, disabled, level)
        if stored is not None:
            self.answer.probes.append(stored)  # its check ran before: heard then, not again
            verdict = Verdict(VerdictKind(stored.verdict), stored.signature, stored.detail, stored.duration_s)
            self._pin(verdict)
            return verdict
        probed = dataclasses.replace(self.spec, target=runtime)
        if self.build is not None:
            check = self.build(probed)
        else:
            check = build_check(probed, self.golden, self.allow_command, self.work_dir)
        verdict, output = check.run(self.model)
        if verdict.kind is VerdictKind.INFRA_ERROR:
            raise PassBisectError(f"the check could not run ({runtime.label}): {verdict.detail or output[-300:]}")
        pins = self._pin(verdict)
        reproduces = self.pinned is not None and verdict.reproduces(self.pinned, self.pinning)
        record = ProbeRecord(
            role, disabled, level, verdict.kind.value, verdict.signature, reproduces, verdict.detail, verdict.duration_s
        )
        self.answer.probes.append(record)
        if pins and isinstance(check, RepeatedCheck):
            self.answer.flaky_note = flaky_builds_note(*check.last_rate, self.target.runtime)
        if self.on_probe is not None:
            self.on_probe(record)
        return verdict

    def _pin(self, verdict: Verdict) -> bool:
        """The first failing probe pins the failure; True when this one did."""
        if self.pinned is not None or not verdict.is_failure:
            return False
        self.pinned = verdict
        return True

    def _stored_probe(self, role: str, disabled: tuple[str, ...], level: str) -> ProbeRecord | None:
        """The ``replayed`` probe in this probe's place, when it is this probe: the search asks
        the same probes in the same order for the same verdicts, so a search rebuilt from the
        stored ones runs only those that had not ended; from the first that differs on, every
        probe runs."""
        done = len(self.answer.probes)
        if done >= len(self.replayed) or len(self.replayed_until) < done:
            return None
        stored = self.replayed[done]
        if (stored.role, stored.disabled, stored.level) != (role, disabled, level):
            return None
        self.replayed_until.append(stored)
        return stored

    def _runtime(self, disabled: tuple[str, ...]) -> RuntimeSpec:
        target = self.target
        if target.runtime == "tensorrt":
            options = tuple(sorted({*target.disabled_build_options, *disabled}))
            return dataclasses.replace(target, disabled_build_options=options)
        optimizers = tuple(sorted({*target.disabled_optimizers, *disabled}))
        return dataclasses.replace(target, disabled_optimizers=optimizers)

    def _done(self, outcome: Outcome) -> PassAnswer:
        self.answer.outcome = outcome
        if self.pinned is not None:
            self.answer.pinned_signature = self.pinned.signature
        return self.answer


def bisect_passes(
    spec: CheckSpec,
    model: Path,
    golden: Path | None = None,
    pinning: Pinning = Pinning.KIND,
    allow_command: bool = True,
    on_probe: ProbeListener | None = None,
) -> PassAnswer:
    """The answer for ``model`` (see ``PassBisection``). Raises ``PassBisectError``/``CheckSpecError``."""
    if spec.kind == "command":
        raise CheckSpecError(
            "kind: a command check names no runtime to bisect; use compare, golden, error or op-present"
        )
    return PassBisection(spec, model, golden, pinning, allow_command, on_probe).run()


__all__ = ["PassAnswer", "PassBisectError", "PassBisection", "PassCandidate", "bisect_passes"]

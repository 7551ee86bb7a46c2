"""``onnx-reducer reduce``: the command line's hooks around ``engine.session.ReductionSession``.

It writes each candidate to ``--iter-artifact`` (weights by reference), runs the check, sorts
artifacts, saves the replay after every verdict, logs every iteration, and writes the minimal
failing (and passing) models at the end. With ``--jobs N`` (``reducer_cli.slots``) up to N checks
run at once, each slot with its own folder (where its artifact is written) and device."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shutil
from pathlib import Path

import onnx

from checks.build import build_check as build_spec_check
from checks.command import CommandCheck, tail
from checks.interactive import InteractiveCheck
from checks.memory import parse_size
from checks.slots import for_slot
from checks.spec import CheckSpec, ModelCheck, load_check_spec
from engine.data_loader import parse_val_ranges
from engine.parallel import SlotWork
from engine.session import ReductionSession, SessionCheck, SlotSessionHooks
from engine.workspace import ReduceOptions, Workspace
from persistence.options import JobOptions
from reducer_cli.args import EXIT_OK, EXIT_SUSPECT, EXIT_UNVERIFIED
from reducer_cli.bundle_cmd import write_cli_bundle
from reducer_cli.check_inputs import check_golden
from reducer_cli.progress import ProgressReporter
from reducer_cli.slots import SlotFolders, SlotPlan, refuse_absolute_artifact, slot_plan, slot_relative
from reducer_core import modelio
from reducer_core.bodies import describe
from reducer_core.cache import cache_key
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.data_reduction import input_sizes
from reducer_core.errors import UsageError
from reducer_core.graph import GraphIndex
from reducer_core.localization import LayerwiseResult, TensorErrors
from reducer_core.prepare import parse_shape_arg
from reducer_core.records import IterationRecord, Localization, ReductionResult
from reducer_core.requests import Answer, CheckRequest, Request
from reducer_core.samples import samples_summary
from reducer_core.verdict import Verdict, VerdictKind
from reducer_core.verification import (
    DISAGREES,
    JUDGED,
    MIN_BAD,
    MIN_GOOD,
    RECHECKED,
    JudgedBytes,
    Suspect,
    Verified,
    agrees,
    checker_crash,
    disagreement,
    file_sha256,
    identity_model,
    judged_agrees,
    sha256_of,
    verified_json,
    worth_preflight,
)


def options_from_args(args: argparse.Namespace) -> ReduceOptions:
    iter_path = Path(args.iter_artifact)
    return ReduceOptions(
        model=Path(args.model),
        work_dir=iter_path.resolve().parent,
        artifact_stem=iter_path.stem,
        external_data_dir=Path(args.external_data_dir) if args.external_data_dir else None,
        input_shapes=dict(parse_shape_arg(s) for s in args.input_shapes),
        shape_inference=args.shape_inference,
        force_fallback_shape_inference=args.force_fallback_shape_inference,
        load_inputs=[Path(p) for p in args.load_inputs],
        seed=args.seed,
        ignore_external_data=args.ignore_external_data,
        fp_to_fp16=args.fp_to_fp16,
        val_ranges=parse_val_ranges(args.val_range),
        data_loader_script=args.data_loader_script,
        save=modelio.SaveOptions(
            external_location=args.save_external_data,
            size_threshold=_threshold_bytes(args.external_data_size_threshold),
            all_tensors_to_one_file=args.all_tensors_to_one_file,
        ),
        link_weights=args.link_weights,
    )


def _threshold_bytes(text: str | None) -> int:
    """Polygraphy's --external-data-size-threshold: bytes, or with a K/M/G suffix (KiB/MiB/GiB)."""
    if text is None:
        return modelio.INLINE_LIMIT_BYTES
    try:
        return parse_size(text, minimum=0)
    except ValueError as exc:
        raise UsageError(f"--external-data-size-threshold {exc}") from None


def spec_from_args(args: argparse.Namespace) -> CheckSpec | None:
    """The ``--check-spec`` document (None without one); ``--check-timeout`` and
    ``--check-memory-limit`` override its timeout and memory limit."""
    if getattr(args, "check_spec", None) is None:
        if getattr(args, "golden", None) is not None:
            raise UsageError("--golden feeds a --check-spec check; give --check-spec SPEC too.")
        return None
    if args.check is not None:
        raise UsageError("Give either --check-spec SPEC or --check COMMAND, not both.")
    spec = load_check_spec(args.check_spec)
    if args.check_timeout is not None:
        spec = dataclasses.replace(spec, timeout=args.check_timeout)
    if getattr(args, "check_memory_limit", None) is not None:
        spec = dataclasses.replace(spec, memory_limit=args.check_memory_limit)
    return spec


def build_check(args: argparse.Namespace, log: ProgressReporter | None = None) -> SessionCheck:
    spec = spec_from_args(args)
    golden, digest = check_golden(args, spec, Path(args.golden) if args.golden else None, log)
    if spec is not None:
        return SessionCheck(build_spec_check(spec, golden), spec, golden, digest)
    if args.check is None:
        return SessionCheck(InteractiveCheck(args.iter_artifact))
    if not args.check:
        raise UsageError("--check needs a command after it, e.g. --check onnx-reducer inspect polygraphy_debug.onnx")
    command = CommandCheck(
        command=args.check,
        fail_codes=args.fail_codes or (),
        ignore_fail_codes=args.ignore_fail_codes or (),
        fail_regexes=args.fail_regex or (),
        timeout_s=args.check_timeout,
        memory_limit_bytes=getattr(args, "check_memory_limit", None),
    )
    return SessionCheck(command)


def config_from_args(args: argparse.Namespace) -> SessionConfig:
    return SessionConfig(
        mode=args.mode,
        reduce_inputs=args.reduce_inputs,
        reduce_outputs=args.reduce_outputs,
        pin_signature=args.pin_signature,
        localize=args.localize,
        min_good=bool(args.min_good or getattr(args, "bundle", None)),  # a bundle carries min-good
        confirm_flaky=confirms_flaky(args),
        reduce_bodies=getattr(args, "reduce_bodies", True),
        reduce_data=getattr(args, "reduce_data", False),
    )


def confirms_flaky(args: argparse.Namespace) -> bool:
    """``--confirm-flaky``/``--no-confirm-flaky``; left out, a new job's default
    (``JobOptions.for_new_job``: on, but for interactive verdicts, no ``--check`` and no
    ``--check-spec``: a person would be asked the same question again)."""
    asked = getattr(args, "confirm_flaky", None)
    if asked is not None:
        return bool(asked)
    interactive = args.check is None and getattr(args, "check_spec", None) is None
    return JobOptions.for_new_job(interactive).confirm_flaky


def plan_from_args(args: argparse.Namespace) -> SlotPlan:
    """``--jobs``/``--devices``, validated; with more than one slot, the paths each slot writes
    must be relative (``reducer_cli.slots``)."""
    plan = slot_plan(args.jobs, args.devices)
    if plan.parallel:
        slot_relative("--iter-artifact", args.iter_artifact)
        if args.iteration_info:
            slot_relative("--iter-info", args.iteration_info)
        for artifact in args.artifacts or ():
            slot_relative("--artifacts", artifact)
        working = [str(Path.cwd()), *([os.environ["PWD"]] if "PWD" in os.environ else [])]
        refuse_absolute_artifact(args.check or (), args.iter_artifact, working)
    return plan


# The debug replay's record of which bytes its verdicts were given to (reducer_core.verification.JudgedBytes).
JUDGED_KEY = "judged_sha256"


class CommandLineRun(SlotSessionHooks):
    """The command line's side of a ``ReductionSession``: the iteration artifact, ``--iter-info``,
    the debug replay after every check, ``--artifacts``, the check's output, the log. With more
    than one slot (``--jobs``) each slot has its own folder and its own copy of the check."""

    def __init__(
        self, args: argparse.Namespace, session: ReductionSession, log: ProgressReporter, plan: SlotPlan | None = None
    ) -> None:
        self.args = args
        self.session = session
        self.ws = session.workspace
        self.plan = plan or SlotPlan()
        self.check: ModelCheck = session.check.check
        if self.plan.devices:
            self.check = for_slot(self.check, None, self.plan.env(1))
        self.log = log
        self.iter_path = Path(args.iter_artifact)
        self.failure_rate: float | None = None
        self.node_errors: TensorErrors | None = None
        self.slots: SlotFolders | None = None
        self.slot_checks: dict[int, ModelCheck] = {}
        self._rate_check: ModelCheck = self.check
        self.flakiness_said = ""  # the flakiness status the log announced
        self.judged = JudgedBytes()  # sha256 of the bytes each check judged (reducer_core.verification)
        self.original_output = ""
        self._original_place: tuple[ModelCheck, Path] = (self.check, self.iter_path)
        self.verified: dict[str, Verified | None] = {}
        self.bundle_verified = True  # --bundle: repro.py reproduced in its clean environment (bundle_cmd)
        self.suspect: Suspect | None = None

    @classmethod
    def start(
        cls,
        args: argparse.Namespace,
        workspace: Workspace,
        check: SessionCheck,
        log: ProgressReporter,
        plan: SlotPlan | None = None,
    ) -> CommandLineRun:
        return cls(args, ReductionSession.start(workspace, check, config_from_args(args)), log, plan)

    def run(self) -> ReductionResult:
        if self.args.load_debug_replay:
            replay = json.loads(Path(self.args.load_debug_replay).read_text())
            loaded = self.session.load_replay(replay)
            self.judged.merge_json(replay.get(JUDGED_KEY, {}))
            self.log.info(
                f"Loaded {loaded} verdict(s) from {self.args.load_debug_replay}; they will not be re-checked."
            )
        self.log.total_nodes = len(self.ws.index)
        if not self.plan.parallel:
            return self.session.run(self)
        self._create_slots()
        return self.session.run_in_slots(self, self.plan.jobs)

    # -- hooks (one check at a time) -------------------------------------------------------------

    def write_iteration(self, request: CheckRequest) -> Path:
        self.session.write(request.candidate, self.iter_path)
        self.judged.written(request.id, request.candidate.fingerprint, self.iter_path.read_bytes())
        self._write_iteration_info(request.number, request.candidate, self.args.iteration_info)
        self._save_replay(skip_current=request)
        return self.iter_path

    def run_check(self, request: CheckRequest, model: Path) -> Verdict:
        verdict, output = self.check.run(model)
        self._judged(request, verdict, output, self.check, model)
        self._show_output(verdict, output)
        self._sort_artifacts(request.number, verdict, self.iter_path, Path.cwd())
        return verdict

    # -- hooks (slots: engine.parallel) ----------------------------------------------------------

    def prepare(self, request: Request, slot: int) -> SlotWork:
        write = functools.partial(self._write_in_slot, slot=slot)
        return self.session.slot_work(request, write, self.slot_checks[slot], self.plan.env(slot))

    def finish(self, request: Request, slot: int, answer: Answer, output: str) -> None:
        if not isinstance(request, CheckRequest) or not isinstance(answer, Verdict):
            return
        if request.phase == "original":
            self._rate_check = self.slot_checks[slot]
        assert self.slots is not None
        self._judged(request, answer, output, self.slot_checks[slot], self.slots.path(slot, self.iter_path))
        self._show_output(answer, output, f" (slot {slot}, iteration {request.number})")
        self._sort_artifacts(request.number, answer, self.slots.path(slot, self.iter_path), self.slots.folder(slot))

    def _judged(self, request: CheckRequest, verdict: Verdict, output: str, check: ModelCheck, path: Path) -> None:
        """A check's verdict on the bytes written for ``request``; the original's output, and the
        check and path that judged it (a final check runs the same way)."""
        self.judged.judged(request.id, verdict)
        if request.phase == "original":
            self.original_output = output
            self._original_place = (check, path)

    def _create_slots(self) -> None:
        written = [Path(p) for p in (self.args.iteration_info, *(self.args.artifacts or ())) if p]
        weights = [self.iter_path.parent / loc for loc in self.ws.sources.files]
        slots = SlotFolders(Path.cwd(), self.plan.jobs, [self.iter_path, *written, *weights])
        slots.create()
        self.slots = slots  # only now ours to remove (create refuses a folder it did not make)
        for slot in range(1, self.plan.jobs + 1):
            self.slot_checks[slot] = for_slot(self.session.check.check, slots.folder(slot), self.plan.env(slot))
        devices = f" on devices {','.join(self.plan.devices)}" if self.plan.devices else ""
        self.log.info(f"Running up to {self.plan.jobs} checks at once{devices}, in {slots.root.name}/slot1..")

    def _write_in_slot(self, request: CheckRequest, slot: int) -> Path:
        assert self.slots is not None
        path = self.slots.path(slot, self.iter_path)
        self.session.write(request.candidate, path)
        self.judged.written(request.id, request.candidate.fingerprint, path.read_bytes())
        if self.args.iteration_info:
            info = self.slots.path(slot, Path(self.args.iteration_info))
            self._write_iteration_info(request.number, request.candidate, str(info))
        if not request.speculative:  # the check the flow waits for (see _save_replay)
            self._save_replay(skip_current=request)
        return path

    def on_record(self, record: IterationRecord) -> None:
        if not record.cached:
            self._save_replay()
            if record.phase == "original":
                self._report_failure_rate()
        self.log.iteration(record)
        self._report_flakiness()

    def _report_flakiness(self) -> None:
        """Say once, as soon as it is known, that the check is flaky (or that inconsistent
        verdicts repeated exactly: the check is not monotone)."""
        report = self.session.machine.flakiness.report()
        if report is None or report.status.value == self.flakiness_said:
            return
        if report.flaky or report.status.value == "repeatable":
            self.flakiness_said = report.status.value
            # flaky is worth a warning; repeatable verdicts are news, not an alarm
            spec = self.session.check.spec
            runtime = spec.target.runtime if spec is not None and spec.target is not None else ""
            (self.log.warning if report.flaky else self.log.info)(report.message(runtime))

    def on_layerwise(self, result: LayerwiseResult) -> None:
        self.node_errors = result.errors  # every compared tensor's error: --summary-json's node_errors

    def on_localization(self, localization: Localization) -> None:
        self.log.info(f"Localisation: path={localization.path}: {localization.reason} ({localization.checks} check(s))")

    # -- around each check ---------------------------------------------------------------------

    def _show_output(self, verdict: Verdict, output: str, where: str = "") -> None:
        failed = verdict.kind is not VerdictKind.PASS
        if output.strip() and (self.args.show_output or (failed and not self.args.hide_fail_output)):
            self.log.info(f"==== check output{where} ====\n" + tail(output))

    def _write_iteration_info(self, iteration: int, candidate: Candidate, path: str | None) -> None:
        if path:
            info = {"iteration": iteration, "nodes": len(candidate)}
            Path(path).write_text(json.dumps(info))

    def _save_replay(self, skip_current: CheckRequest | None = None) -> None:
        """Save the verdicts (those checked ahead of the flow included); with ``skip_current``,
        also a ``_skip_current`` replay that counts the check about to run as the original failure
        (resume past a check that kills the tool; with slots, the check the flow waits for)."""
        if not self.args.save_debug_replay:
            return
        path = Path(self.args.save_debug_replay)
        data = self.session.cache.to_json()
        data[JUDGED_KEY] = self.judged.to_json()
        if skip_current is not None:
            original = self.session.original
            if original is None:
                return
            data["verdicts"][cache_key(skip_current.candidate, skip_current.repeat)] = original.to_json()
            path = path.with_name(f"{path.stem}_skip_current{path.suffix}")
        _atomic_write(path, json.dumps(data, indent=1, sort_keys=True))

    def _sort_artifacts(self, iteration: int, verdict: Verdict, iter_path: Path, where: Path) -> None:
        """Sort ``--artifacts`` (relative to ``where``: the working folder, or the slot's)."""
        if not self.args.artifacts:
            return
        failed = verdict.is_failure
        folder = Path(self.args.artifacts_dir) / ("bad" if failed else "good")
        folder.mkdir(parents=True, exist_ok=True)
        for artifact in (where / name for name in self.args.artifacts):
            target = folder / f"{artifact.stem}_iter{iteration}{artifact.suffix}"
            if artifact.resolve() == iter_path.resolve():
                modelio.write_iteration_model(
                    onnx.load(str(artifact), load_external_data=False), target, self.ws.sources
                )
            elif artifact.exists():
                shutil.move(str(artifact), target)

    def _report_failure_rate(self) -> None:
        rate = getattr(self._rate_check, "last_rate", None)
        if not rate or not rate[1]:
            return
        failed, runs = rate
        self.failure_rate = failed / runs
        if 0 < failed < runs:
            self.log.warning(
                f"The original model is flaky: it failed {failed}/{runs} runs ({100 * failed / runs:.0f}%). "
                "Reduction counts a candidate by the spec's fail_if rule; consider a larger repeat."
            )

    # -- the end ---------------------------------------------------------------------------------

    def summary_extra(self, result: ReductionResult) -> dict[str, object]:
        """Fields of ``--summary-json`` beyond the engine's: slots, speculative checks,
        localisation path, failure rate."""
        extra: dict[str, object] = {
            "jobs": self.plan.jobs,
            "devices": list(self.plan.devices) or None,
            "speculative_checks": speculative_checks(result),
        }
        if result.localization is not None:
            extra["localization"] = result.localization.to_json()
        if self.node_errors is not None:
            extra["node_errors"] = self.node_errors.to_json()
        if self.failure_rate is not None:
            extra["original_failure_rate"] = self.failure_rate
        extra["verified"] = verified_json(self.verified)
        extra["suspect"] = self.suspect.to_json() if self.suspect is not None else None
        extra.update(samples_summary(result))  # the samples judged and those failing
        return extra

    @property
    def exit_code(self) -> int:
        """0, or: a handed-over model whose final check disagreed, or a --bundle whose repro.py did
        not reproduce the pinned failure in its clean environment (``EXIT_UNVERIFIED``); a check
        that fails whatever the model (``EXIT_SUSPECT``)."""
        if any(v is not None and not v.ok for v in self.verified.values()) or not self.bundle_verified:
            return EXIT_UNVERIFIED
        return EXIT_SUSPECT if self.suspect is not None else EXIT_OK

    def write_results(self, result: ReductionResult) -> None:
        """Write -o / --min-good, each verified (``reducer_core.verification``), after the one-check
        preflight that calls out a check independent of the model."""
        self._preflight(result)
        if self.args.output:
            verified = self._hand_over(result, result.min_bad, MIN_BAD, Path(self.args.output))
            self.verified[MIN_BAD] = verified
            self._say_written(f"Minimal failing model ({len(result.min_bad)} nodes)", self.args.output, verified)
            if not verified.ok:
                self.log.error(disagreement(MIN_BAD, self.args.output, verified))
        if self.args.min_good:
            if result.min_good is None:
                self.verified[MIN_GOOD] = None
                self.log.warning("No passing model close to the minimal failing one was seen; --min-good not written.")
            else:
                verified = self._hand_over(result, result.min_good, MIN_GOOD, Path(self.args.min_good))
                self.verified[MIN_GOOD] = verified
                self._say_written(f"Closest passing model ({len(result.min_good)} nodes)", self.args.min_good, verified)
                if not verified.ok:
                    self.log.error(disagreement(MIN_GOOD, self.args.min_good, verified))
        self._describe(result.min_bad)
        if self.suspect is not None:
            self.log.error(self.suspect.message + "\n==== the original's failure output ====\n" + self.suspect.output)
        if getattr(self.args, "bundle", None):
            judged = {v.sha256: v.ok for v in self.verified.values() if v is not None and v.sha256}
            bundle = write_cli_bundle(self.args, self.ws, result, self.session.check, self.log, judged)
            self.bundle_verified = bundle.verified

    def _say_written(self, what: str, path: str, verified: Verified) -> None:
        if verified.status == JUDGED:
            how = "verified: the check judged these exact bytes"
        elif verified.status == RECHECKED:
            how = "verified: checked once more as written"
        else:
            how = "NOT verified"
        self.log.info(f"{what} written to {path} ({how})")

    # -- verified outputs ------------------------------------------------------------------------

    def _hand_over(self, result: ReductionResult, candidate: Candidate, which: str, path: Path) -> Verified:
        """Write ``candidate`` to ``path``: the bytes a check judged when they are self-contained
        (no weight file referenced, no external data asked for), else the self-contained model,
        checked once more as written."""
        pinning = self.session.machine.config.pin_signature
        data = self.ws.iteration_bytes(candidate)
        digest = sha256_of(data)
        verdicts = self.judged.verdicts(candidate.fingerprint, digest)
        inline = self.ws.options.save.external_location is None and not self.ws.weight_locations(candidate)
        if inline and judged_agrees(verdicts, which, result.original, pinning):
            path.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write_bytes(path, data)
            return Verified(JUDGED, digest)
        weights = self.ws.save_self_contained(candidate, path)
        if weights is not None:
            self.log.info(f"Weights of {path} written to {weights}")
        clash = self._data_clash(path)
        if clash is not None:
            self.log.error(
                f"{path} cannot be checked once more as written: its data file {clash.name} would replace a "
                f"different file beside the iteration artifact. Write it to another folder, or name its data "
                "with --save-external-data NAME."
            )
            return Verified(DISAGREES, file_sha256(path))
        runs = self.session.machine.flakiness.repeats() if which == MIN_BAD and result.flakiness else 1
        checks, verdict = 0, None
        for _ in range(max(1, runs)):
            verdict, output = self._check_file(path)
            checks += 1
            self._show_output(verdict, output, f" (final check of {path})")
            if agrees(verdict, which, result.original, pinning):
                return Verified(RECHECKED, file_sha256(path), checks, verdict)
        return Verified(DISAGREES, file_sha256(path), checks, verdict)

    def _data_files(self, path: Path) -> list[tuple[Path, Path]]:
        """(file beside ``path``, where it goes beside the checked artifact) for each data file
        the written model references that exists and is not there already (under
        --ignore-external-data a referenced file may be missing: the check sees what the file says)."""
        place = self._original_place[1]
        locations = modelio.referenced_locations(onnx.load(str(path), load_external_data=False))
        pairs = [(path.parent / location, place.parent / location) for location in sorted(locations)]
        return [(source, target) for source, target in pairs if source.exists() and not _same_path(source, target)]

    def _data_clash(self, path: Path) -> Path | None:
        """A data file of ``path`` whose place beside the checked artifact holds another file (the
        user's own weights, say): it is never replaced."""
        for source, target in self._data_files(path):
            if target.exists() and not os.path.samefile(source, target):
                return target
        return None

    def _check_file(self, path: Path) -> tuple[Verdict, str]:
        """Run the check on the file ``path`` as it is: it is copied where the check that judged
        the original reads its model (with the external-data files it references, linked there
        for the check; ``_data_clash`` made sure none replaces another file)."""
        check, place = self._original_place
        place.parent.mkdir(parents=True, exist_ok=True)
        made: list[Path] = []
        if not (place.exists() and os.path.samefile(path, place)):
            shutil.copyfile(path, place)
        for source, target in self._data_files(path):
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                _link_or_copy(source, target)
                made.append(target)
        try:
            return check.run(place)
        finally:
            for target in made:
                target.unlink(missing_ok=True)

    # -- a check that fails whatever the model -------------------------------------------------

    def _preflight(self, result: ReductionResult) -> None:
        """When every verdict reproduced the original failure, check a trivial model once: if it
        fails the same way, the check does not depend on the model (``reducer_core.verification``)."""
        if isinstance(self.session.check.check, InteractiveCheck):
            return
        if not worth_preflight(result.iterations, result.localization):
            return
        check, place = self._original_place
        trivial = identity_model(self.ws.index, self.ws.ir_cap)
        _atomic_write_bytes(place, trivial.SerializeToString())
        self.log.info("Every candidate failed like the original: checking a trivial model once (Identity nodes).")
        verdict, _ = check.run(place)
        pinning = self.session.machine.config.pin_signature
        if verdict.reproduces(result.original, pinning):
            output = tail(self.original_output or result.original.detail, 2000)
            self.suspect = Suspect(verdict, result.original, checker_crash(self.original_output), output)

    def _describe(self, candidate: Candidate) -> None:
        if len(candidate) <= 10:
            labels = ", ".join(describe(self.ws.index, candidate))
            self.log.info(f"Minimal failing nodes: {labels}")
        if (shrunk := input_sizes(self.ws.index, candidate)) is not None:
            self.log.info(
                f"Smaller inputs: sizes {shrunk['sizes']} ({shrunk['elements_before']} -> "
                f"{shrunk['elements_after']} input elements)"
            )
            if shrunk["weights"]:
                self.log.info(
                    f"Smaller weights: {shrunk['weights']} ({shrunk['initializer_bytes_before']} -> "
                    f"{shrunk['initializer_bytes_after']} bytes of constants)"
                )

    def discard_skip_current_replay(self) -> None:
        """After a finished run the ``_skip_current`` replay has no use; after a crash it stays."""
        if self.args.save_debug_replay:
            replay = Path(self.args.save_debug_replay)
            replay.with_name(f"{replay.stem}_skip_current{replay.suffix}").unlink(missing_ok=True)

    def cleanup(self) -> None:
        if self.args.remove_intermediate:
            self.iter_path.unlink(missing_ok=True)
            modelio.remove_links(self.iter_path.resolve().parent, self.ws.sources)
            if self.slots is not None:
                self.slots.remove()
        self.ws.close()


def speculative_checks(result: ReductionResult) -> int:
    """Checks run ahead of the flow (``--jobs`` above 1): recorded in phase ``ahead``."""
    return sum(1 for record in result.iterations if record.phase == "ahead" and not record.cached)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _same_path(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def write_summary_json(
    path: str, result: ReductionResult, index: GraphIndex, extra: dict[str, object] | None = None
) -> None:
    summary: dict[str, object] = {
        **(extra or {}),
        "nodes_before": result.nodes_before,
        "nodes_after": result.nodes_after,  # body nodes counted, like nodes_before
        "min_bad_nodes": describe(index, result.min_bad),  # a node's label, with what its body keeps
        "min_good_nodes": len(result.min_good) if result.min_good is not None else None,
        "smaller_inputs": input_sizes(index, result.min_bad),  # None when the inputs kept their sizes
        "checks_run": result.checks_run,
        "cache_hits": result.cache_hits,
        "pinned_out": result.pinned_out,
        "flaky": result.flakiness.to_json() if result.flakiness is not None else None,
        "elapsed_s": result.elapsed_s,
        "check_time_s": result.check_time_s,
        "original": result.original.to_json(),
        "iterations": [
            {
                "number": r.number,
                "phase": r.phase,
                "nodes": len(r.candidate),
                "verdict": r.verdict.kind.value,
                "reproduces": r.reproduces,
                "cached": r.cached,
                "overhead_s": r.overhead_s,
                "fingerprint": r.candidate.fingerprint,
            }
            for r in result.iterations
        ],
    }
    Path(path).write_text(json.dumps(summary, indent=1))

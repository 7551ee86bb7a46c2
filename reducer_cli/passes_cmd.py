"""``onnx-reducer bisect-passes MODEL --check-spec SPEC``: which of the runtime's graph optimizers
(onnxruntime) or builder flags and tactic sources (TensorRT) bring the model's failure in.

Every probe is the spec's check in its isolated child (``engine.pass_bisect``): first with nothing
optimized (a failure that needs no optimizer says so in that one check), then as given (it must
fail: the pinned verdict), then halving over the transformers that changed the model, and the
answer verified (those disabled, the check passes). ``--min-bad`` (a reduction's answer) is what
runs by default when given: a few nodes build and run fast; ``--on original`` runs MODEL."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from checks.spec import load_check_spec
from engine.pass_bisect import bisect_passes
from engine.report_bundle import put_answer
from reducer_cli.bisect_args import add_answer_arguments, add_bisect_parser, bundle_to_update
from reducer_cli.progress import ProgressReporter
from reducer_core.errors import UsageError
from reducer_core.pass_bisect import Outcome, PassAnswer, ProbeRecord
from reducer_core.verdict import Pinning

EXIT_OK = 0
EXIT_CHECK_PASSES = 3  # reduce's "the original passed": nothing to bisect
EXIT_UNVERIFIED = 11  # reduce's code for an answer that did not get its verdict again


def add_passes_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = add_bisect_parser(
        sub,
        "bisect-passes",
        "Find the runtime optimizers (onnxruntime) or build options (TensorRT) a failure needs.",
        "Find the smallest set of onnxruntime graph optimizers (disabled_optimizers) whose "
        "disabling makes the check pass, and the optimization level at which the failure first appears; for "
        "a TensorRT target, its builder flags and tactic sources. The candidates are what the runtime changed "
        "in this model; the answer is verified both ways.",
        "The ONNX model (the original).",
    )
    parser.add_argument(
        "--min-bad",
        default=None,
        metavar="MODEL",
        help="The min-bad model a reduction of MODEL wrote (reduce -o): bisected by default (fast to build).",
    )
    parser.add_argument(
        "--on",
        choices=["original", "min-bad"],
        default=None,
        help="Which model to bisect (default: min-bad when --min-bad is given, else the original).",
    )
    add_answer_arguments(
        parser,
        "the check's with everything on",
        "A bug-report bundle of this model's reduction (reduce --bundle): the answer goes into it as "
        "passes.json, and its repro.py prints the optimizers to disable.",
    )


def chosen_model(args: argparse.Namespace) -> tuple[str, Path]:
    """("original"|"min-bad", its path) from ``--on`` and ``--min-bad``."""
    on = args.on or ("min-bad" if args.min_bad else "original")
    if on == "min-bad":
        if not args.min_bad:
            raise UsageError("--on min-bad needs the reduction's answer: give --min-bad MODEL (reduce -o's file).")
        if not Path(args.min_bad).is_file():
            raise UsageError(f"--min-bad: '{args.min_bad}' is not a file; give the model reduce -o wrote.")
        return on, Path(args.min_bad)
    return on, Path(args.model)


def run_bisect_passes(args: argparse.Namespace, log: ProgressReporter) -> int:
    spec = load_check_spec(args.check_spec)
    on, model = chosen_model(args)
    bundle = bundle_to_update(args.bundle)
    log.info(f"Bisecting the optimizers of {spec.target.label if spec.target else spec.kind} on the {on}: {model}")

    def heard(probe: ProbeRecord) -> None:
        log.info(f"check: {describe_probe(probe)}")

    answer = bisect_passes(
        spec,
        model,
        Path(args.golden) if args.golden else None,
        Pinning(args.pin_signature),
        on_probe=heard,
    )
    _report(answer, log)
    if args.summary_json:
        summary = {"task": "bisect-passes", "on": on, "model": str(model), **answer.to_json()}
        Path(args.summary_json).write_text(json.dumps(summary, indent=1))
    if bundle is not None:
        put_answer(bundle, "passes.json", answer.to_json())
        log.info(f"wrote passes.json into {bundle} (its repro.py prints the optimizers to disable)")
    return exit_code(answer)


def describe_probe(probe: ProbeRecord) -> str:
    what = f"without {', '.join(probe.disabled)}" if probe.disabled else "nothing disabled"
    if probe.role == "no-optimizer" and not probe.disabled:
        what = "nothing optimized"
    level = f" at level {probe.level}" if probe.level else ""
    return f"{probe.role}: {what}{level} -> {probe.verdict} {probe.signature}".rstrip()


def exit_code(answer: PassAnswer) -> int:
    if answer.outcome is Outcome.NO_FAILURE:
        return EXIT_CHECK_PASSES
    if answer.outcome is Outcome.UNRESOLVED or (answer.outcome is Outcome.OPTIMIZERS and not answer.verified):
        return EXIT_UNVERIFIED
    return EXIT_OK


def _report(answer: PassAnswer, log: ProgressReporter) -> None:
    log.info("==== Pass bisection ====")
    log.info(answer.message())
    if answer.candidates:
        log.info("candidates: " + ", ".join(f"{c.name} ({c.level})" for c in answer.candidates))
    log.info(f"checks: {answer.checks} (a single culprit takes at most {answer.check_bound})")
    if answer.flaky_note:
        log.warning(answer.flaky_note)
    if answer.outcome is Outcome.OPTIMIZERS:
        field = "disabled_optimizers" if answer.runtime == "onnxruntime" else "disabled_build_options"
        print(f"{field}: [{', '.join(answer.optimizers)}]")

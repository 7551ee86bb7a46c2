"""``onnx-reducer bisect-releases MODEL --check-spec SPEC --runtime-env 1.20=PYTHON ...``: the first
onnxruntime release on which the model fails and the last one that passes.

Each ``--runtime-env`` names an environment (a venv per release: docs/check-specs.md, "Release
bisection") whose interpreter runs the check (``checks.runtime_envs``). Every environment is
probed first (its python must import what a check needs, ``CHILD_PACKAGES``, and hold the release its label
names); then ``reducer_core.release_bisect`` picks the releases to run: the newest first, then
halving, at most ``ceil(log2 R) + 1`` release verdicts (more runs with a flaky check, ``--flaky``).
The model is the file given: the min-bad of a reduction (cheap) or the original."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from checks.build import build_check
from checks.runtime_envs import RuntimeEnv, in_env, probe_release, runtime_envs
from checks.spec import load_check_spec
from engine.report_bundle import put_answer
from reducer_cli.bisect_args import add_answer_arguments, add_bisect_parser, bundle_to_update
from reducer_cli.progress import ProgressReporter
from reducer_core.errors import CheckInfraError, UsageError
from reducer_core.release_bisect import (
    Outcome,
    ReleaseAnswer,
    ReleaseBisection,
    ReleaseError,
    ReleaseInfraError,
    max_release_checks,
)
from reducer_core.verdict import Pinning

EXIT_OK = 0
EXIT_NEWEST_PASSES = 3  # the same code as reduce's "the original passed"


def add_release_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = add_bisect_parser(
        sub,
        "bisect-releases",
        "Find the first onnxruntime release on which a model fails (and the last that passes).",
        "Run the model's check in one environment per onnxruntime release (--runtime-env "
        "VERSION=PYTHON, at least two) and bisect to the first failing and the last passing release: the "
        "newest release first, then halving; at most ceil(log2 R)+1 releases are checked.",
        "The ONNX model: the min-bad of a reduction (cheap), or the original.",
    )
    parser.add_argument(
        "--runtime-env",
        action="append",
        default=[],
        metavar="VERSION=PYTHON",
        help="An onnxruntime release and the python of an environment holding it, e.g. "
        "1.20=/opt/ort-1.20/bin/python; repeat it, once per release (any order).",
    )
    parser.add_argument(
        "--flaky",
        action="store_true",
        help="The check fails only some of the time: a passing newest release is run up to 3 more times, and "
        "every pass counts only after enough passing runs in a row for the measured failure rate.",
    )
    add_answer_arguments(
        parser,
        "the newest release's",
        "A bug-report bundle (reduce --bundle) to put the answer in: releases.json, which its repro.py "
        "prints (the release to pin, the first failing one).",
    )


def run_bisect_releases(args: argparse.Namespace, log: ProgressReporter) -> int:
    bundle = bundle_to_update(args.bundle)
    envs = _envs(args)
    spec = load_check_spec(args.check_spec)
    check = build_check(spec, Path(args.golden) if args.golden else None)
    for env in envs:
        version = _probe(env)
        log.info(f"onnxruntime {env.release}: {env.python} (imports onnxruntime {version})")
    search = ReleaseBisection([env.release for env in envs], args.flaky, Pinning(args.pin_signature))
    by_release = {env.release: env for env in envs}
    limit = max_release_checks(len(envs))
    log.info(f"Bisecting {len(envs)} releases of onnxruntime (at most {limit} releases checked): {args.model}")
    model = Path(args.model)
    while (release := search.next_release()) is not None:
        repeat = search.next_repeat()
        verdict, _ = in_env(check, by_release[release]).run(model)
        tag = f" (run {repeat + 1})" if repeat else ""
        log.info(f"onnxruntime {release}{tag}: {verdict.kind.value} {verdict.signature}".rstrip())
        try:
            search.record(release, verdict)
        except ReleaseInfraError as exc:
            raise CheckInfraError(str(exc)) from None
    answer = search.answer()
    _report(answer, log)
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(release_summary(answer, search), indent=1))
    if bundle is not None:
        put_answer(bundle, "releases.json", answer.to_json())
        log.info(f"wrote releases.json into {bundle} (its repro.py prints the releases to pin)")
    return EXIT_NEWEST_PASSES if answer.outcome is Outcome.NEWEST_PASSES else EXIT_OK


def _envs(args: argparse.Namespace) -> list[RuntimeEnv]:
    try:
        envs = runtime_envs(args.runtime_env)
    except ReleaseError as exc:
        raise UsageError(str(exc)) from None
    if len(envs) < 2:
        raise UsageError(
            f"bisect-releases needs at least two releases; got {len(envs)}. Give --runtime-env VERSION=PYTHON "
            "once per onnxruntime release."
        )
    return envs


def _probe(env: RuntimeEnv) -> str:
    try:
        return probe_release(env)
    except ReleaseError as exc:
        raise UsageError(f"--runtime-env {env.release}: {exc}") from None


def _report(answer: ReleaseAnswer, log: ProgressReporter) -> None:
    log.info("==== Release bisection ====")
    log.info(answer.message())
    strip = " ".join(f"{item['release']}:{item['state']}" for item in answer.strip())
    log.info(f"releases: {strip}")
    log.info(
        f"releases checked: {answer.checks} (at most {max_release_checks(len(answer.releases))}), runs: {answer.runs}"
    )
    flaky = answer.flaky_message()
    if flaky:
        log.warning(flaky)
    for verdict in (answer.last_passing, answer.first_failing):
        if verdict is not None:
            state = "fails" if verdict.fails else "passes"
            log.info(
                f"  {verdict.release} {state}: {verdict.verdict.kind.value} {verdict.verdict.signature} "
                f"({verdict.failures}/{verdict.runs} runs failed) {verdict.verdict.detail[:200]}".rstrip()
            )
    if answer.first_failing is not None:
        print(answer.first_failing.release)


def release_summary(answer: ReleaseAnswer, search: ReleaseBisection) -> dict[str, object]:
    """``--summary-json``: the answer (``reducer_core.release_bisect.ReleaseAnswer.to_json``) and
    every run in order."""
    return {"task": "bisect-releases", **answer.to_json(), "verdicts": [run.to_json() for run in search.runs]}

"""``reduce --bundle FILE.zip``: the bug-report bundle of the command line's reduction
(``engine.bundle``), for ``--check-spec`` runs and ``--check COMMAND`` runs alike."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from engine.bundle import BundleCheck, write_bundle
from engine.session import SessionCheck
from engine.workspace import Log, Workspace
from reducer_core.errors import UsageError
from reducer_core.records import ReductionResult


def bundle_check(args: argparse.Namespace, check: SessionCheck) -> BundleCheck:
    """What the bundle's repro.py runs: the spec (with its golden file), or the ``--check`` command
    (it reads the iteration artifact, ``--iter-artifact``); commands ran in this folder."""
    artifact = Path(args.iter_artifact).name
    if check.spec is not None:
        return BundleCheck.of_spec(check.spec, check.golden, artifact=artifact, cwd=Path.cwd())
    if not args.check:
        raise UsageError("--bundle needs a check repro.py can run: give --check COMMAND or --check-spec SPEC.")
    return BundleCheck.of_command(
        args.check,
        artifact=args.iter_artifact,
        fail_codes=args.fail_codes or (),
        ignore_fail_codes=args.ignore_fail_codes or (),
        fail_regex=args.fail_regex or (),
        timeout=args.check_timeout,
        cwd=Path.cwd(),
    )


def write_cli_bundle(
    args: argparse.Namespace,
    workspace: Workspace,
    result: ReductionResult,
    check: SessionCheck,
    log: Log,
    verified: Mapping[str, bool] | None = None,
) -> None:
    """``verified``: sha256 of the models the run handed over verified -> whether the check agreed
    (``engine.verification``): the bundle does not check those bytes again."""
    check_of = bundle_check(args, check)
    report = write_bundle(Path(args.bundle), workspace, result, check_of, Path(args.model), verified=verified)
    log.info(f"Bug-report bundle written to {args.bundle}: {report.finding}")
    reused = f"; {', '.join(report.reused)} judged by the final verification" if report.reused else ""
    log.info(f"The bundle's self-check ran {report.checks_run} check(s) beyond the reduction's{reused}.")
    if report.reproduced is False:
        log.warning("The bundle's repro.py did not reproduce the failure on min_bad.onnx; see its README.md.")
    elif report.reproduced is None:
        log.warning("The bundle's repro.py could not run its check here; see its README.md.")

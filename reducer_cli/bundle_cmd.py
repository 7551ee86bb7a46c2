"""``reduce --bundle FILE.zip``: the bug-report bundle of the command line's reduction
(``engine.bundle``), for ``--check-spec`` runs and ``--check COMMAND`` runs alike."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from pathlib import Path

from engine.bundle import BundleCheck, BundleReport, write_bundle
from engine.session import SessionCheck
from engine.workspace import Log, Workspace
from reducer_core.errors import UsageError
from reducer_core.records import ReductionResult
from reducer_core.verdict import Pinning


def bundle_check(args: argparse.Namespace, check: SessionCheck) -> BundleCheck:
    """What the bundle's repro.py runs: the spec (with its golden file), or the ``--check`` command
    (it reads the iteration artifact, ``--iter-artifact``); commands ran in this folder."""
    artifact = Path(args.iter_artifact).name
    pinning = Pinning.of(getattr(args, "pin_signature", Pinning.KIND))
    if check.spec is not None:
        of_spec = BundleCheck.of_spec(check.spec, check.golden, artifact=artifact, cwd=Path.cwd())
        return dataclasses.replace(of_spec, pinning=pinning)
    if not args.check:
        raise UsageError("--bundle needs a check repro.py can run: give --check COMMAND or --check-spec SPEC.")
    of_command = BundleCheck.of_command(
        args.check,
        artifact=args.iter_artifact,
        fail_codes=args.fail_codes or (),
        ignore_fail_codes=args.ignore_fail_codes or (),
        fail_regex=args.fail_regex or (),
        timeout=args.check_timeout,
        cwd=Path.cwd(),
    )
    return dataclasses.replace(of_command, pinning=pinning)


def write_cli_bundle(
    args: argparse.Namespace,
    workspace: Workspace,
    result: ReductionResult,
    check: SessionCheck,
    log: Log,
    verified: Mapping[str, bool] | None = None,
) -> BundleReport:
    """Write the bundle; its report says whether it is ``verified``: repro.py reproduced the
    pinned failure on min_bad.onnx (and passed min_good.onnx) in a clean environment (onnx,
    onnxruntime, numpy only). ``verified``: sha256 of the models the run handed over verified ->
    whether the check agreed (``engine.verification``), named in the README."""
    check_of = bundle_check(args, check)
    report = write_bundle(Path(args.bundle), workspace, result, check_of, Path(args.model), verified=verified)
    log.info(f"Bug-report bundle written to {args.bundle}: {report.finding}")
    log.info(f"The bundle's self-check ran repro.py {report.checks_run} time(s), in a clean environment.")
    if not report.verified:
        log.warning(f"The bundle is NOT verified: {report.why_unverified()}; see its README.md.")
    return report

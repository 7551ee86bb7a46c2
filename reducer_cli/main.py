"""Entry point of the ``onnx-reducer`` console script."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Sequence

from engine.workspace import load_workspace
from reducer_cli import args as cli_args
from reducer_cli.client_args import CLIENT_COMMANDS
from reducer_cli.golden_cmd import run_golden
from reducer_cli.inspect_cmd import inspect_model
from reducer_cli.passes_cmd import run_bisect_passes
from reducer_cli.precision_cmd import PrecisionRun, build_precision_check
from reducer_cli.progress import ProgressReporter, reporter_from_args
from reducer_cli.reduce_cmd import (
    CommandLineRun,
    build_check,
    options_from_args,
    plan_from_args,
    speculative_checks,
    write_summary_json,
)
from reducer_cli.release_cmd import run_bisect_releases
from reducer_cli.service_args import SERVICE_COMMANDS
from reducer_cli.writable import check_writable
from reducer_core.bodies import body_size
from reducer_core.errors import (
    CheckInfraError,
    GoalUnreachableError,
    InvalidModelError,
    OriginalDidNotFailError,
    ReducerError,
    UsageError,
)
from reducer_core.samples import samples_lines
from reducer_core.verdict import Goal


def _reduce(ns: argparse.Namespace) -> int:
    log = _reporter(ns)
    if not ns.output and not ns.min_good and not ns.bundle:
        raise UsageError("Give -o/--output (where to write the reduced model), --min-good and/or --bundle FILE.zip.")
    if ns.bundle and ns.check is None and ns.check_spec is None:
        raise UsageError("--bundle needs a check repro.py can run: give --check COMMAND or --check-spec SPEC.")
    plan = plan_from_args(ns)
    check = build_check(ns, log)
    if plan.parallel and ns.check is None and getattr(ns, "check_spec", None) is None:
        raise UsageError(
            f"--jobs {plan.jobs}: interactive mode (no --check) asks about one model at a time; give "
            "--check COMMAND or --check-spec SPEC to run several checks at once."
        )
    workspace = load_workspace(options_from_args(ns), log)
    run = CommandLineRun.start(ns, workspace, check, log, plan)
    deep = body_size(workspace.index.model)  # Loop/If body nodes too, like the summary's counts
    nodes = f"{len(workspace.index)} nodes" + (f" ({deep} with Loop/If bodies)" if deep != len(workspace.index) else "")
    log.info(f"Reducing {ns.model}: {nodes}, mode={ns.mode}, check: {check.check.identity}")
    try:
        result = run.run()
        log.summary(result)
        for line in samples_lines(result):
            log.info(line)
        if plan.parallel:
            log.info(f"slots: {plan.jobs}  checks run ahead of the reduction: {speculative_checks(result)}")
        run.write_results(result)
        run.discard_skip_current_replay()
        if ns.summary_json:
            write_summary_json(ns.summary_json, result, workspace.index, run.summary_extra(result))
    finally:
        run.cleanup()
    return run.exit_code


def _precision(ns: argparse.Namespace) -> int:
    log = _reporter(ns)
    log.goal = Goal.PASS
    check = build_precision_check(ns, log)
    workspace = load_workspace(options_from_args(ns), log)
    try:
        run = PrecisionRun.begin(ns, workspace, check, log)
    except BaseException:
        workspace.close()
        raise
    log.info(f"Finding the nodes of {ns.model} that must stay fp32: {len(workspace.index)} nodes, mode={ns.mode}")
    try:
        result = run.run()
        run.summary(result)
        run.write_results(result)
        run.discard_skip_current_replay()
        if ns.summary_json:
            run.write_summary(ns.summary_json, result)
    finally:
        run.cleanup()
    return cli_args.EXIT_OK


def _golden(ns: argparse.Namespace) -> int:
    return run_golden(ns)


def _bisect_releases(ns: argparse.Namespace) -> int:
    return run_bisect_releases(ns, _reporter(ns))


def _bisect_passes(ns: argparse.Namespace) -> int:
    return run_bisect_passes(ns, _reporter(ns))


def _inspect(ns: argparse.Namespace) -> int:
    print(inspect_model(ns.model, ns.external_data_dir))
    return cli_args.EXIT_OK


def _client_command(ns: argparse.Namespace) -> int:
    from reducer_cli.client_cmd import HANDLERS  # noqa: PLC0415 - httpx loads only for client commands

    return HANDLERS[ns.command](ns)


def _service_command(ns: argparse.Namespace) -> int:
    from reducer_cli.service_cmd import HANDLERS  # noqa: PLC0415 - the service stack (fastapi, sqlalchemy, celery: seconds) loads only for service commands

    return HANDLERS[ns.command](ns)


def _reporter(ns: argparse.Namespace) -> ProgressReporter:
    """The log of this command: ``reduce`` honours -q/-v/--silent/--verbosity/--log-format/--log-file."""
    reporter = getattr(ns, "reporter", None)
    return reporter if isinstance(reporter, ProgressReporter) else ProgressReporter(live=False)


def run(argv: Sequence[str]) -> int:
    ns = cli_args.build_parser().parse_args(list(argv))
    handlers = {"reduce": _reduce, "precision": _precision, "inspect": _inspect, "golden": _golden}
    handlers["bisect-releases"] = _bisect_releases
    handlers["bisect-passes"] = _bisect_passes
    handlers |= dict.fromkeys(SERVICE_COMMANDS, _service_command)
    handlers |= dict.fromkeys(CLIENT_COMMANDS, _client_command)
    with contextlib.ExitStack() as stack:
        if ns.command in ("reduce", "precision"):
            # before the log file is opened and before the first check: a place that cannot be
            # written is one line now, not a traceback after the whole run
            refused = _run_handler(_preflight, ns, ProgressReporter(live=False))
            if refused != cli_args.EXIT_OK:
                return refused
            log_file = stack.enter_context(open(ns.log_file, "a")) if ns.log_file else None
            ns.reporter = reporter_from_args(ns, log_file)
        return _run_handler(handlers[ns.command], ns, _reporter(ns))


_RESUMABLE = ("reduce", "precision")


def _preflight(ns: argparse.Namespace) -> int:
    check_writable(ns)
    return cli_args.EXIT_OK


def _original_passed_advice(ns: argparse.Namespace) -> str:
    if getattr(ns, "check_spec", None):
        return (
            "Make the check spec fail on the full model: for kind compare/golden lower its tolerance (atol/rtol) "
            "or change its target, for kind error check its match, for op-present its ops/names "
            "(--fail-code and --fail-regex do not apply to a spec)."
        )
    return "Check that the --check command fails on the full model, or adjust --fail-code/--fail-regex."


def _infra_advice(exc: CheckInfraError) -> str:
    if str(exc).startswith("The check could not run on the original model"):
        return " Fix the check (is the command on PATH? does it read the --iter-artifact path?) and start again."
    return ""  # a failure mid-way already says how to resume


# the exit code of each error a command raises on purpose (the classes are disjoint); any other
# ReducerError exits with EXIT_ERROR
_EXIT_CODES: tuple[tuple[type[ReducerError], int], ...] = (
    (OriginalDidNotFailError, cli_args.EXIT_ORIGINAL_PASSED),
    (GoalUnreachableError, cli_args.EXIT_ORIGINAL_PASSED),
    (InvalidModelError, cli_args.EXIT_INVALID_MODEL),
    (UsageError, cli_args.EXIT_USAGE),
)


def _reducer_error_code(exc: ReducerError) -> int:
    return next((code for kind, code in _EXIT_CODES if isinstance(exc, kind)), cli_args.EXIT_ERROR)


def _reducer_error_message(exc: ReducerError, ns: argparse.Namespace) -> str:
    """The error's own message, with advice where the user can do something about it."""
    if isinstance(exc, OriginalDidNotFailError):
        return f"{exc} {_original_passed_advice(ns)}"
    if isinstance(exc, CheckInfraError):
        return f"{exc}{_infra_advice(exc)}"
    return str(exc)


def _run_handler(handler: Callable[[argparse.Namespace], int], ns: argparse.Namespace, log: ProgressReporter) -> int:
    """Run a command; the errors it raises on purpose become a message and an exit code."""
    try:
        if ns.command in cli_args.LOCAL_MODEL_COMMANDS:
            missing = cli_args.missing_file_message(ns.model)
            if missing is not None:
                raise UsageError(missing)
        return handler(ns)
    except ReducerError as exc:
        log.error(_reducer_error_message(exc, ns))
        return _reducer_error_code(exc)
    except OSError as exc:  # a file that could not be read or written mid-run (a full disk, a folder made read-only)
        where = f" '{exc.filename}'" if exc.filename else ""
        # a write that failed mid-run (not an input that is missing) can resume from the replay
        resumable = ns.command in _RESUMABLE and not isinstance(exc, FileNotFoundError)
        resume = " Resume with --load-debug-replay and the replay file saved so far." if resumable else ""
        log.error(f"{exc.strerror or exc}{where}.{resume}")
        return cli_args.EXIT_ERROR
    except KeyboardInterrupt:
        log.error("Interrupted. Resume with --load-debug-replay and the replay file saved so far.")
        return cli_args.EXIT_INTERRUPTED


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()

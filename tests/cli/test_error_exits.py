"""Each error a command raises on purpose becomes one log line and its own exit code (issue 27:
one table in reducer_cli.main instead of an except clause per error)."""

from __future__ import annotations

import argparse
import io

import pytest

from reducer_cli import args as cli_args
from reducer_cli.main import _run_handler
from reducer_cli.progress import ProgressReporter
from reducer_core.errors import (
    CheckInfraError,
    GoalUnreachableError,
    InvalidModelError,
    OriginalDidNotFailError,
    ReducerError,
    ReplayMismatchError,
    UnsafeExternalDataError,
    UsageError,
)

CASES = [
    (OriginalDidNotFailError("The original passed."), cli_args.EXIT_ORIGINAL_PASSED, "adjust --fail-code"),
    (GoalUnreachableError("No goal."), cli_args.EXIT_ORIGINAL_PASSED, "No goal."),
    (CheckInfraError("The check could not run on the original model."), cli_args.EXIT_ERROR, "Fix the check"),
    (CheckInfraError("The check broke mid-way."), cli_args.EXIT_ERROR, "The check broke mid-way."),
    (InvalidModelError("Not a model."), cli_args.EXIT_INVALID_MODEL, "Not a model."),
    (UnsafeExternalDataError("Weights outside."), cli_args.EXIT_INVALID_MODEL, "Weights outside."),
    (UsageError("Bad flag."), cli_args.EXIT_USAGE, "Bad flag."),
    (ReplayMismatchError("Other replay."), cli_args.EXIT_ERROR, "Other replay."),
]


@pytest.mark.parametrize(("error", "code", "said"), CASES, ids=[type(case[0]).__name__ for case in CASES])
def test_an_error_raised_on_purpose_is_one_line_and_its_exit_code(error: ReducerError, code: int, said: str) -> None:
    def handler(_: argparse.Namespace) -> int:
        raise error

    stream = io.StringIO()
    ns = argparse.Namespace(command="serve", check_spec=None)
    assert _run_handler(handler, ns, ProgressReporter(stream=stream, live=False)) == code
    lines = stream.getvalue().strip().splitlines()
    assert len(lines) == 1, lines
    assert str(error) in lines[0] and said in lines[0]


def test_a_missing_check_spec_advice_names_the_spec_not_the_fail_code() -> None:
    def handler(_: argparse.Namespace) -> int:
        raise OriginalDidNotFailError("The original passed.")

    stream = io.StringIO()
    ns = argparse.Namespace(command="serve", check_spec="spec.yaml")
    assert _run_handler(handler, ns, ProgressReporter(stream=stream, live=False)) == cli_args.EXIT_ORIGINAL_PASSED
    assert "lower its tolerance" in stream.getvalue()

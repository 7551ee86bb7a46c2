"""Exit codes of the service commands (``submit``, ``status``, ``download``, ``cancel``, ``retry``,
``jobs``). 0-4 and 10-11 mean what they mean for ``reduce``; 5-9 are the service's own outcomes. The table
in README.md and docs/ci.md lists them; tests/client checks every service error code is mapped."""

from __future__ import annotations

from pathlib import PurePosixPath

from reducer_client import Job, Problem

# The same numbers and meanings as ``reduce`` (reducer_cli/args.py; a test keeps them equal).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_ORIGINAL_PASSED = 3
EXIT_INVALID_MODEL = 4
EXIT_INTERRUPTED = 130
# As for ``reduce``: the answer is suspect (the check fails whatever the model), or a final model
# did not get its verdict when checked once more (the job failed with ``unverified-result``).
EXIT_SUSPECT = 10
EXIT_UNVERIFIED = 11
# The service's own outcomes.
EXIT_JOB_FAILED = 5
EXIT_CANCELLED = 6
EXIT_STILL_RUNNING = 7
EXIT_UNREACHABLE = 8
EXIT_AUTH = 9

# The job's error.code (persistence.enums.ErrorCode) when it failed; any other code is EXIT_JOB_FAILED.
JOB_ERROR_EXITS = {
    "original-did-not-fail": EXIT_ORIGINAL_PASSED,
    "invalid-model": EXIT_INVALID_MODEL,
    "invalid-check": EXIT_USAGE,
    "check-infra-error": EXIT_JOB_FAILED,
    "too-many-attempts": EXIT_JOB_FAILED,
    "time-limit-exceeded": EXIT_JOB_FAILED,
    "internal-error": EXIT_JOB_FAILED,
    "unverified-result": EXIT_UNVERIFIED,
}

# Problems (RFC 9457) with which the api refuses an upload because of the model or bundle (api/validation.py,
# api/bundles.py, api/uploads.py), by title, or by the last segment of a problem ``type`` URI.
MODEL_REFUSALS = frozenset(
    {"invalid model", "unsafe external data", "unsafe bundle", "invalid upload", "upload too large"}
)


def exit_for_job(job: Job) -> int:
    """The exit code of a job as it stands: its end, or EXIT_STILL_RUNNING while queued or running."""
    if job.status == "succeeded":
        return EXIT_SUSPECT if job.suspect is not None else EXIT_OK
    if job.status == "cancelled":
        return EXIT_CANCELLED
    if job.status == "failed":
        return JOB_ERROR_EXITS.get(job.error.code if job.error else "", EXIT_JOB_FAILED)
    return EXIT_STILL_RUNNING


def _problem_names(problem: Problem) -> set[str]:
    names = {problem.title.strip().lower()}
    if problem.type not in ("", "about:blank"):
        names.add(PurePosixPath(problem.type.rstrip("/")).name.replace("-", " ").lower())
    return names


def exit_for_problem(problem: Problem) -> int:
    """The exit code of a refused request: 9 auth, 4 a refused model, 2 bad usage or a refused spec
    (or no such job), 1 anything else."""
    if problem.status in (401, 403):
        return EXIT_AUTH
    if _problem_names(problem) & MODEL_REFUSALS:
        return EXIT_INVALID_MODEL
    if problem.status in (404, 413, 422):
        return EXIT_USAGE
    return EXIT_ERROR

"""Words the command line shares between its local and service outputs."""

from __future__ import annotations


def iterations_line(iterations: int, checks_run: int, cache_hits: int) -> str | None:
    """Why the iterations and the checks run differ, where they do (None where they are equal): a
    verdict from a cache is an iteration that ran no check; a flaky answer's re-checks and checks
    run ahead, then not needed, are check runs without an iteration of their own."""
    if iterations == checks_run:
        return None
    return (
        f"iterations {iterations}, checks run {checks_run}: an iteration is one candidate judged; "
        f"{cache_hits} were answered from a cache without running a check, and a flaky answer's "
        "re-checks or checks run ahead and then not needed are check runs without an iteration of their own"
    )

"""A ``task: bisect-releases`` job on the api's side: its form options (``releases``, ``flaky``)
and what ``GET /v1/jobs/{id}`` shows of it (``releases``): the answer once the job succeeded
(``worker.release_job``), else the strip of releases judged so far, both from its session state."""

from __future__ import annotations

from typing import Any

from api.problems import ProblemError, field_errors
from checks.spec import CheckSpec
from persistence.enums import JobTask
from persistence.models import Job
from persistence.options import JobOptions
from reducer_core.release_bisect import ReleaseError, Run, max_release_checks, order_releases, replay


def release_options(fields: dict[str, str], spec: CheckSpec | None) -> dict[str, Any]:
    """The ``JobOptions`` fields of a bisect-releases job: ``releases`` (comma-separated versions, at least two;
    left out: every release the farm advertises when the job starts) and ``flaky``."""
    if spec is None:
        detail = "task bisect-releases needs an automatic check spec, not kind: 'interactive'."
        raise ProblemError(422, "Invalid option", detail, errors=field_errors("task", detail))
    return {"task": JobTask.BISECT_RELEASES, **release_fields(fields)}


def release_fields(fields: dict[str, str]) -> dict[str, Any]:
    """The form's ``releases`` (ordered; absent when left out) and ``flaky``; 422 when malformed."""
    options: dict[str, Any] = {}
    raw = fields.get("releases", "").strip()
    if raw:
        try:
            options["releases"] = tuple(order_releases(part.strip() for part in raw.split(",") if part.strip()))
        except ReleaseError as exc:
            detail = f"releases: {exc} (comma-separated onnxruntime versions, e.g. 1.20.1,1.21.0,1.22.0)."
            raise ProblemError(422, "Invalid option", detail, errors=field_errors("releases", detail)) from None
    flaky = fields.get("flaky", str(JobOptions.flaky).lower()).strip().lower()
    if flaky not in ("true", "false", "1", "0"):
        detail = f"flaky must be true or false, not '{flaky[:50]}'."
        raise ProblemError(422, "Invalid option", detail, errors=field_errors("flaky", detail))
    options["flaky"] = flaky in ("true", "1")
    return options


def release_view(job: Job) -> dict[str, Any] | None:
    """``releases`` of ``GET /v1/jobs/{id}`` (module doc); None before the first release is chosen."""
    state = job.session_state or {}
    answer = state.get("answer")
    if isinstance(answer, dict):
        return {**answer, "done": True}
    options = JobOptions.from_stored(job.mode, job.options)
    releases = state.get("releases") or options.releases
    if not releases:
        return None
    runs = [Run.from_json(r) for r in state.get("runs", [])]
    try:
        search = replay(releases, runs, options.flaky)
    except (ReleaseError, ValueError):
        return None
    settled = {v.release: v for v in search.judged}
    strip = [
        {"release": r, "state": "unknown" if r not in settled else ("fail" if settled[r].fails else "pass")}
        for r in search.releases
    ]
    return {
        "done": False,
        "releases": list(search.releases),
        "strip": strip,
        "checks": len(search.judged),
        "max_checks": max_release_checks(len(search.releases)),
        "runs": len(search.runs),
        "next": search.next_release(),
    }

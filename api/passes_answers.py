"""A ``task: bisect-passes`` job on the api's side: its form options and what ``GET /v1/jobs/{id}``
shows of it (``passes``): the answer once the job succeeded (``worker.passes_job``), else the
probes run so far, both from its session state."""

from __future__ import annotations

from typing import Any

from api.problems import ProblemError, field_errors
from checks.pass_candidates import bisected_runtime
from checks.spec import CheckSpec
from persistence.enums import JobTask
from persistence.models import Job

TASK = "bisect-passes"


def passes_options(spec: CheckSpec | None) -> dict[str, Any]:
    """The ``JobOptions`` fields of a bisect-passes job; the spec must run the model on a target runtime."""
    if spec is None:
        detail = "task bisect-passes needs an automatic check spec with a target, not kind: 'interactive'."
        raise ProblemError(422, "Invalid option", detail, errors=field_errors("task", detail))
    try:
        bisected_runtime(spec)
    except ValueError as exc:
        detail = f"task bisect-passes: {exc}."
        raise ProblemError(422, "Invalid check spec", detail, errors=field_errors("check_spec", detail)) from None
    return {"task": JobTask.BISECT_PASSES}


def passes_view(job: Job) -> dict[str, Any] | None:
    """``passes`` of ``GET /v1/jobs/{id}`` (module doc); None before the first probe ended."""
    state = job.session_state or {}
    if state.get("task") != TASK:
        return None
    answer = state.get("answer")
    if isinstance(answer, dict):
        return {**answer, "done": True}
    probes = state.get("probes") or []
    return {"done": False, "checks": len(probes), "probes": probes}

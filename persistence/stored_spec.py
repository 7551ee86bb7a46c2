"""A job's check spec as stored (``jobs.spec``): parsed once at intake and normalised
(``checks.spec.CheckSpec.to_json``, every default filled in), read back here by the worker, the
graph view and the bisect jobs without parsing the text again. The text as the user sent it stays
in ``jobs.check_spec``: it is what they see and download.

A row without a stored spec (``kind: interactive``, or a text that no longer parsed when
migration 0014 back-filled it) or whose stored document this version no longer reads gives a
``CheckSpecError`` saying to submit the job again: a worker fails such a job as an invalid check
(``worker.stops``), the graph view shows no tolerance."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checks.spec import CheckSpec, CheckSpecError, check_spec_from_dict

RESUBMIT = "submit the job again with a spec this version accepts (docs/check-specs.md)"


def stored_spec(document: Mapping[str, Any] | None) -> CheckSpec:
    """The ``CheckSpec`` a job's ``jobs.spec`` holds. Raises ``CheckSpecError`` (module doc)."""
    if document is None:
        raise CheckSpecError(f"check spec: this job's spec no longer parses with this version; {RESUBMIT}")
    try:
        return check_spec_from_dict(dict(document))
    except CheckSpecError as exc:
        raise CheckSpecError(f"{exc} (the spec this job was stored with); {RESUBMIT}") from None


def normalised(spec: CheckSpec | None) -> dict[str, Any] | None:
    """What intake stores in ``jobs.spec`` for ``spec`` (None: an interactive job, no spec to run)."""
    return None if spec is None else spec.to_json()

"""A job's check units and the session's requests they stand for: a worker's queued check, or an
interactive job's question asked of a person (``persistence.repositories.units``)."""

from __future__ import annotations

from persistence.models import CheckUnit
from persistence.repositories.units import NewUnit
from reducer_core.candidate import Candidate
from reducer_core.requests import CheckRequest, LayerwiseRequest, Request, repeat_of


def request_of(unit: CheckUnit) -> Request:
    """The session's request a check unit stands for (its repeat index, for a flaky check's
    re-check, is part of the request id)."""
    if unit.kind == LayerwiseRequest.kind:
        return LayerwiseRequest()
    candidate = Candidate.from_json(unit.candidate)
    repeat = repeat_of(unit.request_id)
    return CheckRequest(candidate, unit.phase, unit.attempt, unit.number, repeat, speculative=unit.speculative)


def new_unit(request: Request) -> NewUnit:
    if isinstance(request, LayerwiseRequest):
        return NewUnit(request.id, request.kind, 0, "layerwise", 0, False, {}, 0)
    return NewUnit(
        request.id,
        request.kind,
        request.number,
        request.phase,
        request.attempt,
        request.speculative,
        request.candidate.to_json(),
        len(request.candidate),
    )

"""A session rebuilt from its state for every verdict (the service's workers do so) keeps counting
infrastructure-error retries of the step it waits at: the retry's answer is taken, and a check
that keeps failing to run still stops the session after ``infra_retries + 1`` tries."""

from __future__ import annotations

import pytest

from reducer_core.cache import VerdictCache
from reducer_core.config import SessionConfig
from reducer_core.errors import CheckInfraError
from reducer_core.graph import GraphIndex
from reducer_core.machine import ReductionMachine
from reducer_core.requests import CheckRequest
from reducer_core.verdict import Verdict, VerdictKind
from tests.models import branchy_model, index_of

CONFIG = SessionConfig()
BROKEN = Verdict(VerdictKind.INFRA_ERROR, "", "the tool is missing")


def _rebuilt(index: GraphIndex, state: dict[str, object]) -> ReductionMachine:
    return ReductionMachine.from_state(index, CONFIG, VerdictCache(index.fingerprint, "check"), dict(state))


def _first(machine: ReductionMachine) -> CheckRequest:
    request = machine.next_requests(1)[0]
    assert isinstance(request, CheckRequest)
    return request


def test_a_retry_answered_after_a_rebuild_is_taken() -> None:
    index = index_of(branchy_model())
    machine = ReductionMachine(index, CONFIG, VerdictCache(index.fingerprint, "check"))
    original = _first(machine)
    machine.deliver(original, BROKEN)
    retry = _first(machine)
    assert retry.attempt == 1
    rebuilt = _rebuilt(index, machine.state())
    rebuilt.deliver(retry, Verdict(VerdictKind.FAIL, "boom"))
    assert rebuilt.original is not None and rebuilt.original.kind is VerdictKind.FAIL


def test_a_check_that_never_runs_stops_a_rebuilt_session() -> None:
    index = index_of(branchy_model())
    state = ReductionMachine(index, CONFIG, VerdictCache(index.fingerprint, "check")).state()
    with pytest.raises(CheckInfraError):
        for _ in range(CONFIG.infra_retries + 1):
            machine = _rebuilt(index, state)
            machine.deliver(_first(machine), BROKEN)
            state = machine.state()

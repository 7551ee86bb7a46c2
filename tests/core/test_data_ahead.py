"""The data step's sizes checked ahead with spare slots (``reducer_core.data_ahead``): the step
takes fewer rounds of K checks, with the sequential answer. Rounds, not seconds."""

from __future__ import annotations

import pytest

from reducer_core.data_reduction import PHASE as DATA_PHASE
from reducer_core.machine import ReductionMachine
from reducer_core.requests import CheckRequest
from tests.core.test_data_reduction import SizeOracle, seq_model, session
from tests.models import index_of


def data_rounds(machine: ReductionMachine, oracle: SizeOracle, slots: int) -> int:
    """Run ``machine`` in rounds of up to ``slots`` checks; the rounds the data step waited in."""
    rounds = 0
    while not machine.done:
        batch = machine.next_requests(slots)
        assert batch and len(batch) <= slots
        first = batch[0]
        rounds += isinstance(first, CheckRequest) and first.phase == DATA_PHASE
        for request in batch:
            assert isinstance(request, CheckRequest)
            machine.deliver(request, oracle(request.candidate))
    return rounds


@pytest.mark.parametrize("threshold", [2, 17, 33, 63])
def test_sizes_ahead_take_fewer_rounds_with_the_same_answer(threshold: int) -> None:
    """Before the sizes ahead, the data step took one round per size checked with any slots."""
    index = index_of(seq_model())
    sequential, parallel = session(index), session(index)
    one = data_rounds(sequential, SizeOracle(index, threshold), 1)
    four = data_rounds(parallel, SizeOracle(index, threshold), 4)
    assert parallel.result.min_bad == sequential.result.min_bad
    assert parallel.result.min_bad.data, "the sizes shrank"
    assert one >= 4
    assert four <= (one + 1) // 2
    ahead = [r for r in parallel.records if r.phase == "ahead" and r.candidate.data]
    assert ahead, "sizes were checked ahead, and recorded as checks"
    assert parallel.checks_run <= 2 * sequential.checks_run + 4

"""The session machine with several slots (``next_requests(k, in_flight)``): speculative checks
never change the answer of a deterministic check, take fewer rounds, land in the verdict cache,
and survive a save/resume between any two deliveries."""

from __future__ import annotations

import json

import pytest
from onnx import helper

from reducer_core.cache import VerdictCache
from reducer_core.config import SessionConfig
from reducer_core.graph import GraphIndex
from reducer_core.machine import ReductionMachine
from reducer_core.requests import CheckRequest, Request
from reducer_core.strategies import MODES
from tests.core.test_session import LOCALIZING, Answerer, answers, fresh, run
from tests.models import branchy_model, index_of, make_model, names_in


def chain(length: int) -> GraphIndex:
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i in range(length)]
    return index_of(make_model(nodes, ["t0"], [f"t{length}"]))


def run_in_rounds(machine: ReductionMachine, answer: Answerer, slots: int) -> int:
    """Start up to ``slots`` requests, deliver every answer, repeat; the number of rounds."""
    rounds = 0
    while not machine.done:
        batch = machine.next_requests(slots)
        assert batch, "a machine that is not done always has work"
        assert len(batch) <= slots
        assert len({request.id for request in batch}) == len(batch)
        rounds += 1
        for request in batch:
            machine.deliver(request, answer(request))
    return rounds


def final(machine: ReductionMachine) -> tuple[frozenset[int], frozenset[int] | None]:
    good = machine.result.min_good
    return machine.result.min_bad.nodes, good.nodes if good is not None else None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("slots", [2, 4, 8])
@pytest.mark.parametrize("culprits", [{"C"}, {"F"}, {"A", "H"}, {"C", "E", "H"}])
def test_the_answer_with_k_slots_is_the_sequential_answer(mode: str, slots: int, culprits: set[str]) -> None:
    index = index_of(branchy_model())
    answer = answers(index, culprits)
    config = SessionConfig(mode=mode, min_good=True)
    sequential = fresh(index, config)
    run(sequential, answer)
    parallel = fresh(index, config)
    rounds = run_in_rounds(parallel, answer, slots)
    assert final(parallel) == final(sequential)
    assert rounds <= len(sequential.records)
    assert parallel.checks_run <= 2 * (sequential.checks_run + slots)


def test_a_localising_session_ends_alike_with_four_slots() -> None:
    index = index_of(branchy_model())
    answer = answers(index, {"D"}, layerwise=[("mismatch:nonfinite", "tD")])
    sequential = fresh(index, LOCALIZING)
    run(sequential, answer)
    parallel = fresh(index, LOCALIZING)
    run_in_rounds(parallel, answer, 4)
    assert final(parallel) == final(sequential)
    assert parallel.checks_run <= 2 * sequential.checks_run


def test_single_culprits_on_a_long_chain_take_under_half_the_rounds_with_four_slots() -> None:
    index = chain(200)
    for culprit in ("n7", "n99", "n188"):
        answer = answers(index, {culprit})
        sequential = fresh(index, SessionConfig())
        one = run_in_rounds(sequential, answer, 1)
        parallel = fresh(index, SessionConfig())
        four = run_in_rounds(parallel, answer, 4)
        assert names_in(index, parallel.result.min_bad) == {culprit}
        assert four <= one / 2, (culprit, one, four)
        assert parallel.checks_run <= 2 * sequential.checks_run


def test_requests_in_flight_are_not_handed_out_again() -> None:
    index = chain(64)
    machine = fresh(index, SessionConfig())
    first = machine.next_requests(4)
    assert len(first) == 4 and isinstance(first[0], CheckRequest) and first[0].phase == "original"
    assert all(isinstance(r, CheckRequest) and r.speculative for r in first[1:]), "bisection ahead of the original"
    busy = [r.id for r in first[:2]]
    more = machine.next_requests(4, in_flight=busy)
    assert more and not {r.id for r in more} & set(busy)
    assert machine.next_requests(4, in_flight=[r.id for r in first]) == [], "the wasted-check budget is spent"


def test_speculative_verdicts_are_recorded_once_and_counted_as_checks() -> None:
    index = chain(64)
    answer = answers(index, {"n40"})
    machine = fresh(index, SessionConfig())
    run_in_rounds(machine, answer, 4)
    numbers = [record.number for record in machine.records if not record.cached]
    assert len(numbers) == len(set(numbers)) == machine.checks_run
    assert any(record.phase == "ahead" for record in machine.records)


@pytest.mark.parametrize("stop_after", [1, 2, 3, 5, 8])
def test_a_session_saved_mid_flight_resumes_to_the_same_answer(stop_after: int) -> None:
    index = chain(64)
    answer = answers(index, {"n23"})
    reference = fresh(index, SessionConfig())
    run_in_rounds(reference, answer, 4)
    machine = fresh(index, SessionConfig())
    lost: list[Request] = []
    for _ in range(stop_after):
        batch = machine.next_requests(4)
        machine.deliver(batch[0], answer(batch[0]))
        lost = batch[1:]  # in flight when the process died: never delivered
    state = json.loads(json.dumps(machine.state()))
    again = ReductionMachine.from_state(index, SessionConfig(), VerdictCache(index.fingerprint, "check"), state)
    run_in_rounds(again, answer, 4)
    assert final(again) == final(reference)
    assert all(isinstance(request, CheckRequest) for request in lost)

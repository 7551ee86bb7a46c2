"""The machine numbers what it hands out and what it records: records 1, 2, 3... in recording order
with no gap, cached records and checks ahead of the flow included, whatever happens to the
speculative checks never answered; a request handed out keeps its number across a save/resume
(the state carries the numbers in flight), so a driver never renumbers."""

from __future__ import annotations

import json

from reducer_core.cache import VerdictCache
from reducer_core.config import SessionConfig
from reducer_core.graph import GraphIndex
from reducer_core.machine import ReductionMachine
from reducer_core.requests import CheckRequest
from tests.core.test_session import answers, branchy, fresh, resumed, run
from tests.core.test_session_parallel import chain

__all__ = ["branchy"]  # the fixture


def _iterations(machine: ReductionMachine) -> list[int]:
    return [record.iteration for record in machine.records]


def test_records_are_numbered_without_gap_cached_ones_included(branchy: GraphIndex) -> None:
    config = SessionConfig(mode="bisect", min_good=True)
    answer = answers(branchy, {"C"})
    first = fresh(branchy, config)
    run(first, answer)
    again = fresh(branchy, config)  # the same reduction with every verdict known: cached records
    again.cache.merge_json(first.cache.to_json())
    again.next_requests(0)  # starts the flow: every verdict is known, so it runs to the end
    run(again, answer)
    assert any(record.cached for record in again.records)
    assert _iterations(again) == list(range(1, len(again.records) + 1))
    assert _iterations(first) == list(range(1, len(first.records) + 1))


def test_speculative_checks_never_answered_take_no_record_number() -> None:
    index = chain(40)
    answer = answers(index, {"n29"})
    machine = fresh(index, SessionConfig(mode="bisect"))
    dropped = 0
    while not machine.done:
        batch = machine.next_requests(4)
        assert batch
        machine.deliver(batch[0], answer(batch[0]))  # the rest are cancelled in flight
        dropped += len(batch) - 1
    assert dropped > 0, "the machine never looked ahead"
    assert _iterations(machine) == list(range(1, len(machine.records) + 1))


def test_a_request_in_flight_keeps_its_number_across_a_resume() -> None:
    index = chain(40)
    answer = answers(index, {"n29"})
    machine = fresh(index, SessionConfig(mode="bisect"))
    run(machine, answer, limit=3)
    batch = [r for r in machine.next_requests(3) if isinstance(r, CheckRequest)]
    assert len(batch) == 3
    numbers = {request.id: request.number for request in batch}
    assert len(set(numbers.values())) == 3
    state = json.loads(json.dumps(machine.state()))
    assert state["in_flight"] == numbers
    again = resumed(index, SessionConfig(mode="bisect"), state)
    waited = again.next_requests(1)[0]  # the request the flow waits for, asked again: same number
    assert isinstance(waited, CheckRequest) and waited.number == numbers[waited.id]
    asked = again.next_requests(4, in_flight=set(numbers) - {waited.id})
    later = [r for r in asked if isinstance(r, CheckRequest) and r.id not in numbers]
    assert all(r.number > max(numbers.values()) for r in later)


def test_resumed_records_go_on_after_the_saved_ones(branchy: GraphIndex) -> None:
    config = SessionConfig(mode="bisect")
    answer = answers(branchy, {"C"})
    machine = fresh(branchy, config)
    run(machine, answer, limit=4)
    again = resumed(branchy, config, machine.state())
    run(again, answer)
    assert _iterations(again) == list(range(len(machine.records) + 1, len(machine.records) + len(again.records) + 1))


def test_seeded_verdicts_answer_as_farm_records_once(branchy: GraphIndex) -> None:
    config = SessionConfig(mode="bisect")
    answer = answers(branchy, {"C"})
    other = fresh(branchy, config)
    run(other, answer)
    verdicts = other.cache.to_json()["verdicts"]
    machine = ReductionMachine(branchy, config, VerdictCache(branchy.fingerprint, "check"))
    assert machine.seed(verdicts) == len(verdicts)
    assert machine.seed(verdicts) == 0  # never over a verdict held
    state = json.loads(json.dumps(machine.state()))
    assert set(state["farm"]) == set(verdicts)
    machine.next_requests(0)
    run(machine, answer)
    assert machine.checks_run == 0
    sources = [record.source for record in machine.records]
    farm = [r.candidate.fingerprint for r in machine.records if r.source == "farm"]
    assert sources and set(sources) <= {"farm", "job"} and "farm" in sources
    assert len(farm) == len(set(farm))  # a seeded verdict counts as the farm's the first time only
    assert not machine.farm & set(farm)


def test_a_state_of_version_1_resumes_and_asks_the_driver_where_records_go_on(branchy: GraphIndex) -> None:
    config = SessionConfig(mode="bisect")
    answer = answers(branchy, {"C"})
    machine = fresh(branchy, config)
    run(machine, answer, limit=3)
    old = json.loads(json.dumps(machine.state()))
    old["version"] = 1
    for key in ("in_flight", "farm"):
        del old[key]
    del old["counters"]["recorded"]
    again = resumed(branchy, config, old)
    assert not again.numbered  # the driver sets ``recorded`` from what it stored (worker.live_session)
    again.recorded, again.numbered = len(machine.records), True
    run(again, answer)
    assert again.records[0].iteration == len(machine.records) + 1
    assert json.loads(json.dumps(again.state()))["version"] == 2

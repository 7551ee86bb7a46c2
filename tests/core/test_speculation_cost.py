"""What asking for work costs while checks run (the parallel driver's pattern: ask with the free
slots and the ids in flight after every delivery): the speculation search stays small when no
candidate can be taken (every gamble spent, the likely ones in flight), instead of exploring the
whole tree of futures to its depth limit."""

from __future__ import annotations

import pytest

from reducer_core.config import SessionConfig
from reducer_core.requests import Request
from reducer_core.strategies.base import Strategy
from tests.core.test_session import answers, fresh
from tests.core.test_session_parallel import chain


@pytest.mark.parametrize("slots", [2, 4, 8])
@pytest.mark.parametrize("culprit", ["n7", "n100", "n188"])
def test_asking_with_checks_in_flight_forks_few_strategies(
    monkeypatch: pytest.MonkeyPatch, slots: int, culprit: str
) -> None:
    forks: list[int] = [0]
    real_fork = Strategy.fork

    def counted_fork(self: Strategy, *args: object) -> Strategy:
        forks[0] += 1
        return real_fork(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Strategy, "fork", counted_fork)
    index = chain(200)
    answer = answers(index, {culprit})
    machine = fresh(index, SessionConfig())
    in_flight: list[Request] = []
    most = 0
    while not machine.done:
        forks[0] = 0
        in_flight += machine.next_requests(slots - len(in_flight), [r.id for r in in_flight])
        most = max(most, forks[0])
        first = in_flight.pop(0)  # the oldest finishes first
        machine.deliver(first, answer(first))
    assert most <= 40 * slots, f"one call forked the strategy {most} times"

"""The worker process's one scheduler (``worker.scheduler``): its duties run again and again, a slow
one delays none of the others, a duty runs once at a time, ``wake`` runs one now, one that raises
runs again, and none starts once it is stopped. Waits are on events, never on sleeps."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from worker.scheduler import Scheduler

WAIT_S = 30.0  # what a test waits for an event at most (a loaded machine)


@pytest.fixture
def scheduler() -> Iterator[Scheduler]:
    scheduler = Scheduler("test").start()
    yield scheduler
    scheduler.stop()


class _Counter:
    """A duty that counts its runs and sets ``reached`` at the ``target``-th."""

    def __init__(self, target: int) -> None:
        self.runs, self.target = 0, target
        self.reached = threading.Event()

    def __call__(self) -> None:
        self.runs += 1
        if self.runs >= self.target:
            self.reached.set()


def test_a_duty_runs_again_and_again(scheduler: Scheduler) -> None:
    counter = _Counter(3)
    scheduler.every(0.01, counter, "count")
    assert counter.reached.wait(WAIT_S)


def test_a_slow_duty_delays_no_other(scheduler: Scheduler) -> None:
    started, release = threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(WAIT_S)

    scheduler.every(0.01, slow, "slow", first_s=0.0)
    counter = _Counter(5)
    try:
        assert started.wait(WAIT_S)
        scheduler.every(0.01, counter, "quick")
        assert counter.reached.wait(WAIT_S), "the quick duty ran on while the slow one ran"
    finally:
        release.set()


def test_a_duty_runs_once_at_a_time_and_a_wake_while_it_runs_runs_it_again_after(scheduler: Scheduler) -> None:
    running, release, second = threading.Event(), threading.Event(), threading.Event()
    at_once: list[int] = []
    active = [0]
    lock = threading.Lock()

    def duty() -> float:
        with lock:
            active[0] += 1
            at_once.append(active[0])
        if not running.is_set():
            running.set()
            release.wait(WAIT_S)
        else:
            second.set()
        with lock:
            active[0] -= 1
        return 3600.0  # only a wake runs it again soon

    planned = scheduler.every(3600.0, duty, "once", first_s=0.0)
    assert running.wait(WAIT_S)
    scheduler.wake(planned)  # while it runs: once more, after it
    scheduler.wake(planned)
    release.set()
    assert second.wait(WAIT_S), "woken while it ran: it runs again as soon as it ends"
    assert max(at_once) == 1, at_once


def test_a_duty_that_raises_runs_again(scheduler: Scheduler) -> None:
    counter = _Counter(2)

    def failing() -> None:
        counter()
        raise RuntimeError("boom")

    scheduler.every(0.01, failing, "failing")
    assert counter.reached.wait(WAIT_S)


def test_wake_runs_a_duty_now_and_the_returned_delay_plans_the_next_run(scheduler: Scheduler) -> None:
    ran = threading.Semaphore(0)

    def duty() -> float:
        ran.release()
        return 3600.0  # not again within the test, unless woken

    planned = scheduler.every(3600.0, duty, "woken", first_s=3600.0)
    scheduler.wake(planned)
    assert ran.acquire(timeout=WAIT_S)
    scheduler.wake(planned)
    assert ran.acquire(timeout=WAIT_S)


def test_no_duty_starts_once_stopped() -> None:
    scheduler = Scheduler("stopped").start()
    counter = _Counter(1)
    planned = scheduler.every(3600.0, counter, "never", first_s=3600.0)
    scheduler.stop()
    scheduler.wake(planned)
    assert not counter.reached.wait(0.2)

"""Running a reduction session's checks several at a time: ``drive_parallel``.

    stopped = drive_parallel(machine, slots=4, hooks=hooks)

Up to ``slots`` requests run at once, each in a *slot* (numbered 1..slots) and its own thread;
a check's work happens in its child process, so the threads only wait. The main thread asks the
machine for work (``next_requests(free slots, in flight)``: the request the flow waits for, then
speculative checks), prepares each request in its slot (``hooks.prepare``: write the candidate
where the slot's check reads it), and delivers answers in the order they complete
(``hooks.finish`` first: show the output, sort artifacts), asking for more as slots free up: no
slot stays idle while the machine has work. With a deterministic check the answer is the
sequential one (the machine only consumes verdicts of the candidates its flow asks for).

It ends when the machine is done, when ``hooks.should_stop`` says so (polled once the original
failed), or on any exception (``OriginalDidNotFailError``, ``CheckInfraError``, Ctrl-C's
``KeyboardInterrupt``, an error in a hook): then every check still running is killed (its stop
scope, ``checks.cancel``, kills its process group) and its thread is waited for before the
exception goes on. Checks still running when the machine is done were speculative and are no
longer needed: they are killed the same way, and their verdicts are never delivered."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Protocol

from checks.cancel import POLL_S, stop_checks_when
from reducer_core.machine import ReductionMachine
from reducer_core.requests import Answer, Request
from reducer_core.verdict import Verdict

Outcome = tuple[Answer, str]
"""What a slot's work returns: the answer to deliver and the check's output (may be empty)."""
SlotWork = Callable[[], Outcome]
"""The work ``SlotHooks.prepare`` returns for a slot's thread to run."""
ROUND_GRACE = 0.25
"""How long, as a share of the first finished check's run time, the checks started with it may
take longer and still be delivered with it: one round (checks of the same cost end together)."""
ROUND_GRACE_MAX_S = 1.0
_BATCHES = itertools.count()


class SlotHooks(Protocol):
    """What ``drive_parallel`` needs from its caller. ``prepare`` and ``finish`` run in the main
    thread (one at a time); the work ``prepare`` returns runs in the slot's thread."""

    def prepare(self, request: Request, slot: int) -> SlotWork:
        """Get ``request`` ready in ``slot`` (write its candidate) and return the work to run."""
        ...

    def finish(self, request: Request, slot: int, answer: Answer, output: str) -> None:
        """The slot's work ended; called before the answer is delivered and the slot reused."""
        ...

    def should_stop(self) -> bool:
        """Polled between deliveries once the original failed: True ends the run early."""
        ...


@dataclass
class _Running:
    request: Request
    slot: int
    began: float
    batch: int = 0  # the call of ``_start_work`` that started it: checks started together
    ended: float = 0.0


def drive_parallel(machine: ReductionMachine, slots: int, hooks: SlotHooks) -> bool:
    """Run ``machine`` to its end with up to ``slots`` requests at once; True when ``should_stop``
    ended it early. See the module's documentation for how it ends."""
    if slots < 1:
        raise ValueError("a parallel run needs at least one slot")
    stop = threading.Event()
    free = list(range(slots, 0, -1))  # popped from the end: slot 1 first
    running: dict[Future[Outcome], _Running] = {}
    with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="onnx-reducer-slot") as pool:
        try:
            changed = True  # the machine may want more work started (only after a delivery)
            while not machine.done:
                if machine.original is not None and hooks.should_stop():
                    return True
                if changed:
                    _start_work(machine, hooks, pool, stop, free, running)
                if not running:
                    raise RuntimeError("The reduction session has no work to start and none running.")
                finished = _completed(running)
                changed = bool(finished)
                for future in finished:
                    entry = running.pop(future)
                    answer, output = future.result()
                    hooks.finish(entry.request, entry.slot, answer, output)
                    free.append(entry.slot)
                    machine.deliver(entry.request, answer, overhead_s=_overhead(entry, answer))
            return False
        finally:
            stop.set()  # kills every check still running; the pool's exit waits for the threads


def _start_work(
    machine: ReductionMachine,
    hooks: SlotHooks,
    pool: ThreadPoolExecutor,
    stop: threading.Event,
    free: list[int],
    running: dict[Future[Outcome], _Running],
) -> None:
    """Fill the free slots with what the machine wants started now."""
    if not free:
        return
    in_flight = [entry.request.id for entry in running.values()]
    batch = next(_BATCHES)
    for request in machine.next_requests(len(free), in_flight):
        slot = free.pop()
        entry = _Running(request, slot, time.monotonic(), batch)
        work = hooks.prepare(request, slot)
        running[pool.submit(_run_slot_work, work, stop, entry)] = entry


def _run_slot_work(work: SlotWork, stop: threading.Event, entry: _Running) -> Outcome:
    """In the slot's thread: the work inside a stop scope (``checks.cancel``) that ``stop`` ends."""
    try:
        with stop_checks_when(stop.is_set):
            return work()
    finally:
        entry.ended = time.monotonic()


def _completed(running: dict[Future[Outcome], _Running]) -> list[Future[Outcome]]:
    """The work that finished within ``POLL_S`` (often none), first finished first, with the rest
    of its round: the checks started together with the first one finished, still running, get
    ``ROUND_GRACE`` of its run time (at most ``ROUND_GRACE_MAX_S``) to finish too, so the machine
    plans the next round knowing every verdict of this one (``strategies/culprit_plan.py``)."""
    done, pending = wait(running, timeout=POLL_S, return_when=FIRST_COMPLETED)
    if done and pending:
        first = min((running[future] for future in done), key=lambda entry: entry.ended)
        grace = min(ROUND_GRACE * (first.ended - first.began), ROUND_GRACE_MAX_S)
        same_round = [future for future in pending if running[future].batch == first.batch]
        if same_round:
            more, _ = wait(same_round, timeout=grace, return_when=ALL_COMPLETED)
            done |= more
    return sorted(done, key=lambda future: running[future].ended)


def _overhead(entry: _Running, answer: Answer) -> float:
    """The driver's time around the check: preparing the slot and the thread's hand-offs."""
    took = entry.ended - entry.began - (answer.duration_s if isinstance(answer, Verdict) else 0.0)
    return max(took, 0.0)

"""``engine.parallel.drive_parallel``: the session's answer with slots, never more than ``slots``
at once, and every check process killed when the run stops early or fails."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from checks.command import CommandCheck
from engine.parallel import SlotWork, drive_parallel
from reducer_core.config import SessionConfig
from reducer_core.machine import ReductionMachine
from reducer_core.requests import Answer, Request
from reducer_core.strategies import MODES
from reducer_core.verdict import Verdict, VerdictKind
from tests.checks.processes import running
from tests.core.test_session import Answerer, answers, fresh, run
from tests.core.test_session_parallel import chain
from tests.models import branchy_model, index_of


class Hooks:
    """Answers with ``answer`` (in the slot's thread); counts how many run at once."""

    def __init__(self, answer: Answerer, stop_after: int | None = None) -> None:
        self.answer = answer
        self.stop_after = stop_after
        self.delivered = 0
        self.running: set[int] = set()
        self.most = 0
        self.lock = threading.Lock()

    def prepare(self, request: Request, slot: int) -> SlotWork:
        assert slot not in self.running, "a busy slot is never given more work"
        self.running.add(slot)
        self.most = max(self.most, len(self.running))
        return lambda: (self.answer(request), "")

    def finish(self, request: Request, slot: int, answer: Answer, output: str) -> None:
        self.running.discard(slot)
        self.delivered += 1

    def should_stop(self) -> bool:
        return self.stop_after is not None and self.delivered >= self.stop_after


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("slots", [1, 3, 8])
def test_the_parallel_driver_ends_with_the_sequential_answer(mode: str, slots: int) -> None:
    index = index_of(branchy_model())
    answer = answers(index, {"B", "G"})
    config = SessionConfig(mode=mode, min_good=True)
    sequential = fresh(index, config)
    run(sequential, answer)
    parallel = fresh(index, config)
    hooks = Hooks(answer)
    assert drive_parallel(parallel, slots, hooks) is False
    assert parallel.done
    assert parallel.result.min_bad == sequential.result.min_bad
    assert parallel.result.min_good == sequential.result.min_good
    assert 1 <= hooks.most <= slots


def sleeping_check(pid_dir: Path) -> CommandCheck:
    """A real check process that records its pid and hangs (until killed). The pid file appears
    whole (written, then renamed): a reader never sees it half written."""
    record = f'echo $$ > "{pid_dir}/$$.part" && mv "{pid_dir}/$$.part" "{pid_dir}/$$.pid"'
    return CommandCheck(["sh", "-c", f"{record}; exec sleep 120"])


class HangingHooks(Hooks):
    """The original answers at once (it fails); every other request runs a hanging process."""

    def __init__(self, machine: ReductionMachine, pid_dir: Path, stop_after: int | None) -> None:
        super().__init__(answers(machine.index, {"n5"}), stop_after)
        self.check = sleeping_check(pid_dir)
        self.pid_dir = pid_dir

    def should_stop(self) -> bool:
        """Stops only once a hanging check has recorded its pid (it is surely running then)."""
        return super().should_stop() and any(self.pid_dir.glob("*.pid"))

    def prepare(self, request: Request, slot: int) -> SlotWork:
        super().prepare(request, slot)
        if getattr(request, "phase", "") == "original":
            return lambda: (Verdict(VerdictKind.FAIL, "exit=1", "", 0.0), "")
        return self.check.run


def test_stopping_early_kills_every_running_check(tmp_path: Path) -> None:
    machine = fresh(chain(32), SessionConfig())
    hooks = HangingHooks(machine, tmp_path, stop_after=1)
    assert drive_parallel(machine, 4, hooks) is True
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert pids, "checks were running when the run stopped"
    assert not any(running(pid) for pid in pids)
    assert not machine.done


def test_an_error_in_a_slot_stops_the_run_and_kills_the_others(tmp_path: Path) -> None:
    machine = fresh(chain(32), SessionConfig())

    class Failing(HangingHooks):
        def prepare(self, request: Request, slot: int) -> SlotWork:
            work = super().prepare(request, slot)
            if slot == 3:

                def broken() -> tuple[Answer, str]:
                    while len(list(tmp_path.glob("*.pid"))) < 2:  # the other slots' checks have started
                        threading.Event().wait(0.01)
                    raise OSError("disk full")

                return broken
            return work

    with pytest.raises(OSError, match="disk full"):
        drive_parallel(machine, 4, Failing(machine, tmp_path, stop_after=None))
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert len(pids) >= 2
    assert not any(running(pid) for pid in pids)

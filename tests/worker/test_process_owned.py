"""What one worker process owns (issue 27): each context, the one a ``WorkerProcess`` or an
embedded slot runs with, carries its own preparations, prepared jobs, live sessions' counts and unit leases, and
two of them in one Python process (the embedded server's slots) share none of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy.orm import Session

from engine.session import ReductionSession
from persistence.db import Database
from persistence.layout import DataLayout
from persistence.models import Job
from reducer_core.requests import SessionListener
from worker.context import RunnerContext
from worker.live_session import LiveSession
from worker.local import LocalRunner
from worker.process import WorkerProcess
from worker.settings import WorkerSettings


@pytest.fixture
def two_slots(tmp_path: Path) -> Iterator[tuple[WorkerProcess, WorkerProcess]]:
    """The embedded server's two slots (two ``WorkerProcess`` objects in this Python process)."""
    db = Database(f"sqlite:///{tmp_path / 'unused.db'}")
    ctx = RunnerContext(
        db=db, layout=DataLayout(tmp_path), lease_s=60, max_attempts=3, time_limit_s=60, allow_command=False
    )
    runner = LocalRunner(ctx, WorkerSettings(worker_gpus="", local_workers=2))
    yield runner.nodes[0], runner.nodes[1]
    db.dispose()


def test_a_preparation_belongs_to_the_slot_preparing_it(two_slots: tuple[WorkerProcess, WorkerProcess]) -> None:
    first, second = two_slots
    with first.ctx.preparing.of("job-1"):
        assert first.ctx.preparing.jobs() == ["job-1"]
        assert second.ctx.preparing.jobs() == []  # the other slot's cancel watch stops none of it
        assert second.ctx.preparing.stop("job-1") == 0
    assert first.ctx.preparing.jobs() == []


class _Kept:
    """A session kept live (the part ``LiveSessions.take`` touches when the version matches)."""

    def __init__(self) -> None:
        self.listeners: list[SessionListener] = []

    def listen(self, listener: SessionListener) -> None:
        self.listeners.append(listener)


class _Owner:
    """A prepared job holding a live session of state version 2."""

    def __init__(self) -> None:
        self.live: LiveSession | None = LiveSession(2, cast(ReductionSession, _Kept()))

    def session(self, state: object, listener: SessionListener | None = None) -> ReductionSession:
        raise AssertionError("the live session is reused, not rebuilt")


def test_a_slot_counts_only_the_sessions_it_took(two_slots: tuple[WorkerProcess, WorkerProcess]) -> None:
    first, second = two_slots
    taken = first.ctx.live.take(
        cast(Session, None), _Owner(), Job(id="job-1", state_version=2), cast(SessionListener, object())
    )
    assert isinstance(taken, _Kept) and taken.listeners
    assert (first.ctx.live.stats.reused, second.ctx.live.stats.reused) == (1, 0)


def test_a_lease_renewal_thread_belongs_to_the_slot_holding_it(two_slots: tuple[WorkerProcess, WorkerProcess]) -> None:
    first, second = two_slots
    held = first.ctx.leases.hold(1, "job-1")
    try:
        assert first.ctx.leases.renewing  # its renewal thread started with its first unit held
        assert not second.ctx.leases.renewing  # the other slot holds nothing, renews nothing
    finally:
        first.ctx.leases.release(held)


class _Prepared:
    """A prepared job as the keeping sees it: its folder, and closing it."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_prepared_job_is_kept_by_the_slot_that_prepared_it(
    two_slots: tuple[WorkerProcess, WorkerProcess], tmp_path: Path
) -> None:
    first, second = two_slots
    prepared = _Prepared(tmp_path)
    first.ctx.prepared.add("job-1", prepared)
    assert first.ctx.prepared.find("job-1") is prepared
    assert second.ctx.prepared.find("job-1") is None  # the other slot prepares its own (its own folder)
    second.ctx.prepared.drop("job-1")
    assert not prepared.closed  # nor does it close this slot's
    first.ctx.prepared.drop("job-1")
    assert prepared.closed

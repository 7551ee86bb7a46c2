"""The leases of running check units, renewed from one thread per process (``worker.unit_lease``),
against PostgreSQL: a held unit's lease and its job's run on, a unit another worker took is lost
(its event set, no longer renewed), a released one is left alone, and the thread ends once nothing
is held."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from persistence.db import Database
from persistence.enums import JobStatus
from persistence.layout import DataLayout
from persistence.models import CheckUnit, Job, utcnow
from persistence.repositories import TeamRepository
from persistence.repositories.units import NewUnit, UnitRepository
from tests.service.helpers import stored_job
from worker import unit_lease
from worker.context import RunnerContext
from worker.unit_lease import HeldUnit, LeaseKeeper

LEASE_S = 0.6  # renewed every 0.2 s
WAIT_S = 30.0


@pytest.fixture
def ctx(db_url: str, tmp_path: Path) -> Iterator[RunnerContext]:
    db = Database(db_url)
    layout = DataLayout(tmp_path)
    yield RunnerContext(
        db=db, layout=layout, lease_s=LEASE_S, max_attempts=3, time_limit_s=60, allow_command=True, worker="me"
    )
    db.dispose()


def _running_units(db: Database, count: int) -> tuple[str, list[int]]:
    """A running job (its lease running) with ``count`` units claimed by worker "me": (job id, unit ids)."""
    with db.session() as session:
        job = stored_job(session, TeamRepository(session).get_or_create("team-lease").id, JobStatus.RUNNING)
        job.lease_expires_at = utcnow()
        units = UnitRepository(session)
        new = [NewUnit(f"r{n}", "check", n, "p", 0, False, {}, 1) for n in range(count)]
        ids = units.add(job.id, new)
        for unit_id in ids:
            assert units.claim(unit_id, "me", LEASE_S) is not None
        return job.id, ids


def _lease_of(db: Database, model: type[Job] | type[CheckUnit], key: str | int) -> datetime:
    with db.session() as session:
        row = session.get(model, key)
        assert row is not None and row.lease_expires_at is not None
        return row.lease_expires_at


def _eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _renewed(ctx: RunnerContext, unit: int, times: int = 1) -> None:
    """Wait until the unit's lease was renewed ``times`` more times."""
    for _ in range(times):
        before = _lease_of(ctx.db, CheckUnit, unit)
        _eventually(lambda b=before: _lease_of(ctx.db, CheckUnit, unit) > b, "the held unit's lease runs on")


def test_held_leases_run_on_a_unit_taken_away_is_lost_and_the_thread_ends(ctx: RunnerContext) -> None:
    keeper = LeaseKeeper(ctx)
    job_id, (kept, taken, released) = _running_units(ctx.db, 3)
    taken_lease, job_lease = _lease_of(ctx.db, CheckUnit, taken), _lease_of(ctx.db, Job, job_id)
    with ctx.db.session() as session:  # another worker has taken this one (its lease ran out)
        unit = session.get(CheckUnit, taken)
        assert unit is not None
        unit.worker = "someone-else"
    held = {unit: keeper.hold(unit, job_id) for unit in (kept, taken, released)}
    assert held[taken].lost.wait(WAIT_S), "the unit another worker holds is lost"
    _renewed(ctx, released)
    assert _lease_of(ctx.db, Job, job_id) > job_lease  # the job's lease runs on too
    keeper.release(held[released])
    _renewed(ctx, kept, 2)  # a round that began before the release is over
    after_release = _lease_of(ctx.db, CheckUnit, released)
    _renewed(ctx, kept, 2)  # a whole round since (a round renews ``kept`` before ``released``)
    assert _lease_of(ctx.db, CheckUnit, released) == after_release  # released: left alone
    assert _lease_of(ctx.db, CheckUnit, taken) == taken_lease  # another worker's: left alone
    assert not held[kept].lost.is_set() and not held[released].lost.is_set()
    assert keeper.renewing
    keeper.release(held[kept])
    _eventually(lambda: not keeper.renewing, "the thread ends once nothing is held")
    again = keeper.hold(kept, job_id)  # and starts again with the next unit held
    twice = keeper.hold(kept, job_id)  # a second hold of the same unit (another slot's)
    keeper.release(again)  # releases only its own hold
    _renewed(ctx, kept)
    keeper.release(twice)
    assert not again.lost.is_set() and not twice.lost.is_set()


def test_a_renewal_thread_that_died_is_started_again_by_the_next_hold(
    ctx: RunnerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    keeper = LeaseKeeper(ctx)
    job_id, (unit,) = _running_units(ctx.db, 1)

    def broken(terms: object, held: HeldUnit) -> bool:
        raise RuntimeError("a bug")

    monkeypatch.setattr(unit_lease, "_renew", broken)
    first = keeper.hold(unit, job_id)
    _eventually(lambda: not keeper.renewing, "the thread that met the bug has ended")
    monkeypatch.undo()
    second = keeper.hold(unit, job_id)
    assert keeper.renewing
    _renewed(ctx, unit)
    keeper.release(first)
    keeper.release(second)


def test_a_blocked_renewal_holds_up_neither_the_others_nor_their_release(ctx: RunnerContext) -> None:
    keeper = LeaseKeeper(ctx)
    blocked_job, (blocked,) = _running_units(ctx.db, 1)
    other_job, (other,) = _running_units(ctx.db, 1)
    with ctx.db.session() as session:  # a long transaction holds the first job's row: its renewal waits
        session.execute(select(Job.id).where(Job.id == blocked_job).with_for_update())
        held = keeper.hold(blocked, blocked_job)
        kept = keeper.hold(other, other_job)
        _renewed(ctx, other, 3)  # renewed round after round meanwhile
        released = threading.Thread(target=keeper.release, args=(kept,), name="release")
        released.start()
        released.join(WAIT_S)
        assert not released.is_alive(), "releasing another unit waited for the blocked renewal"
    keeper.release(held)
    assert not held.lost.is_set() and not kept.lost.is_set()

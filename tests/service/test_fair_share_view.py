"""What fair share sees (``UnitRepository.available_work``), against PostgreSQL: a big job's
queued checks do not crowd a newer team's check out of view, so that team's check goes first."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

from persistence.db import Database
from persistence.enums import JobStatus
from persistence.fairshare import fair_order
from persistence.models import Job, utcnow
from persistence.repositories import TeamRepository
from persistence.repositories.units import NewUnit, UnitRepository
from tests.service.helpers import stored_job

BIG_JOB_CHECKS = 250  # more than fair share reads per team


@pytest.fixture
def session(database: Database) -> Iterator[Session]:
    """One transaction, rolled back: the rows stay this test's."""
    with database.session() as session:
        yield session
        session.rollback()


def _running_job(session: Session, team: str, checks: int, age_s: float) -> Job:
    job = stored_job(session, TeamRepository(session).get_or_create(team).id, JobStatus.RUNNING)
    job.created_at = utcnow() - timedelta(seconds=age_s)
    job.lease_expires_at = utcnow() + timedelta(seconds=60)
    units = [NewUnit(f"r{n}", "check", n, "p", 0, False, {}, 1) for n in range(checks)]
    UnitRepository(session).add(job.id, units)
    session.flush()
    return job


def test_a_big_job_s_checks_do_not_hide_a_newer_team_s_check(session: Session) -> None:
    suffix = uuid.uuid4().hex[:8]
    big_team, small_team = f"big-{suffix}", f"small-{suffix}"
    big = _running_job(session, big_team, BIG_JOB_CHECKS, age_s=60)
    small = _running_job(session, small_team, 1, age_s=1)
    units = UnitRepository(session)
    assert units.claim_first(big.id, "w1", 60) is not None  # the big team runs a check already
    work = units.available_work(["cpu"], 3)
    assert small.id in {item.job_id for item in work}, "the newer team's check is in view"
    ours = [item for item in fair_order(work, units.team_loads(), {}, None) if item.team in (big_team, small_team)]
    first = ours[0]  # (other tests' rows may be in view too)
    assert first.job_id == small.id and first.kind == "unit"

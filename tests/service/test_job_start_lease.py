"""A job being started keeps its attempt's lease through the process's lease keeper
(``worker.unit_lease.LeaseKeeper.hold_start``, no thread of its own per start): the lease is
renewed while it is held, and a renewal that finds another attempt holding the job sets ``lost``.
Against PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from persistence.db import Database
from persistence.repositories import ClaimResult, JobRepository
from tests.service.helpers import chain_model, submit
from tests.service.in_process import in_process_context
from worker.context import RunnerContext

LEASE_S = 0.6  # renewed every 0.2 s
WAIT_S = 60.0


@pytest.fixture
def ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    yield from in_process_context(db_url, data_dir, job_lease_s=LEASE_S)


def _lease(database: Database, job_id: str) -> datetime:
    with database.session() as session:
        job = JobRepository(session).get(job_id)
        assert job is not None and job.lease_expires_at is not None
        return job.lease_expires_at


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.05)


def test_a_started_job_s_lease_is_renewed_while_held_and_lost_to_another_attempt(
    client: httpx.Client, ctx: RunnerContext, database: Database
) -> None:
    job_id = submit(client, chain_model(6, 3).SerializeToString()).json()["id"]
    with database.session() as session:
        assert JobRepository(session).claim(job_id, LEASE_S, 3) is ClaimResult.CLAIMED
    first = _lease(database, job_id)
    held = ctx.leases.hold_start(job_id, attempt=1)
    try:
        _until(lambda: _lease(database, job_id) > first, "the lease is renewed")
        with database.session() as session:  # another worker took the job again (attempt 2)
            job = JobRepository(session).get(job_id)
            assert job is not None
            job.attempts = 2
            session.commit()
        assert held.lost.wait(WAIT_S), "a renewal finds the job held by another attempt"
    finally:
        ctx.leases.release(held)

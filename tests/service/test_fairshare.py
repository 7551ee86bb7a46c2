"""Fair share's ordering and queue position (pure functions over what the repositories read)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from checks.requirements import Requirements
from persistence.fairshare import fair_order, jobs_ahead, parse_shares
from persistence.repositories.units import TeamLoad, Work

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
NONE = Requirements()


def _job(team: str, job_id: str, minute: int, kind: str = "job", number: int = 0) -> Work:
    return Work(kind, job_id if kind == "job" else number, job_id, team, T0 + timedelta(minutes=minute), number, NONE)


def test_teams_take_turns_and_a_team_s_oldest_job_goes_first() -> None:
    work = [_job("a", f"a{i}", i) for i in range(40)] + [_job("b", "b1", 50)]
    loads = {"a": TeamLoad(0, T0 + timedelta(minutes=60))}  # a was served last; b never
    order = fair_order(work, loads, {}, None)
    assert order[0].job_id == "b1"
    assert [w.job_id for w in order[1:4]] == ["a0", "a1", "a2"]


def test_running_checks_per_share_decide_before_the_last_turn() -> None:
    work = [_job("a", "a1", 0), _job("b", "b1", 1)]
    busy_a = {"a": TeamLoad(2, T0), "b": TeamLoad(1, T0 + timedelta(minutes=5))}
    assert fair_order(work, busy_a, {}, None)[0].job_id == "b1"  # a runs 2 checks, b 1
    assert fair_order(work, busy_a, {"a": 4.0}, None)[0].job_id == "a1"  # a's share is 4: 2/4 < 1/1


def test_a_team_at_its_cap_waits() -> None:
    work = [_job("a", "a1", 0), _job("b", "b1", 1)]
    loads = {"a": TeamLoad(3, None), "b": TeamLoad(0, T0)}
    assert [w.job_id for w in fair_order(work, loads, {}, 3)] == ["b1"]


def test_a_running_job_s_checks_come_before_the_team_s_newer_jobs() -> None:
    work = [_job("a", "a2", 5), _job("a", "a1", 0, kind="unit", number=7)]
    assert [w.kind for w in fair_order(work, {}, {}, None)] == ["unit", "job"]


def test_queue_position_interleaves_teams_by_share() -> None:
    queued = [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")]
    assert jobs_ahead("b1", "b", queued, {}) == 1
    assert jobs_ahead("a3", "a", queued, {}) == 3
    assert jobs_ahead("b1", "b", queued, {"a": 2.0}) == 2  # a gets two turns per b's one


def test_team_shares_are_parsed_or_refused_with_the_fix() -> None:
    assert parse_shares("team-a=2, team-b=1") == {"team-a": 2.0, "team-b": 1.0}
    assert parse_shares("") == {}
    for bad in ("team-a", "team-a=0", "=2", "team-a=x"):
        with pytest.raises(ValueError, match="TEAM=WEIGHT"):
            parse_shares(bad)

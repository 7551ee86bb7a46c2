"""Fair share between teams: which queued work a free worker takes first, and where a queued job
stands in line. Pure functions over what ``UnitRepository`` reads.

Teams with queued work take turns: the team with the fewest running checks per share goes first
(``TEAM_SHARES``, default 1 each), ties going to the team served longest ago (round-robin); a team
at ``TEAM_MAX_RUNNING_CHECKS`` waits. Within a team the oldest job goes first (its checks before a
newer job starts), so one team's forty jobs never keep another team's single job waiting for more
than a free worker."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from persistence.repositories.units import TeamLoad, Work

_NEVER = datetime.min.replace(tzinfo=UTC)


def parse_shares(text: str) -> dict[str, float]:
    """``"team-a=2,team-b=1"`` -> {"team-a": 2.0, "team-b": 1.0}; a clear error on anything else."""
    shares: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = -1.0
        if not sep or not name.strip() or weight <= 0:
            raise ValueError(f"TEAM_SHARES entry '{part}' is not TEAM=WEIGHT with a weight above 0 (e.g. team-a=2).")
        shares[name.strip()] = weight
    return shares


def fair_order(
    work: Sequence[Work],
    loads: Mapping[str, TeamLoad],
    shares: Mapping[str, float],
    team_cap: int | None,
) -> list[Work]:
    """``work`` in the order a free worker should try it (teams at their cap left out)."""
    by_team: dict[str, list[Work]] = {}
    for item in sorted(work, key=lambda w: (w.job_created, w.job_id, w.kind != "unit", w.number)):
        by_team.setdefault(item.team, []).append(item)

    def turn(team: str) -> tuple[float, datetime, str]:
        load = loads.get(team, TeamLoad(0, None))
        return load.running / shares.get(team, 1.0), load.last_served or _NEVER, team

    ordered: list[Work] = []
    for team in sorted(by_team, key=turn):
        if team_cap is not None and loads.get(team, TeamLoad(0, None)).running >= team_cap:
            continue
        ordered += by_team[team]
    return ordered


def jobs_ahead(job_id: str, team: str, queued: Sequence[tuple[str, str]], shares: Mapping[str, float]) -> int:
    """How many queued jobs start before ``job_id`` when teams take turns by share. ``queued``:
    (job id, team) of every queued job, oldest first."""
    lines: dict[str, list[str]] = {}
    for jid, owner in queued:
        lines.setdefault(owner, []).append(jid)
    mine = lines.get(team, [])
    if job_id not in mine:
        return 0
    turns = (mine.index(job_id) + 1) / shares.get(team, 1.0)  # rounds until this job's turn
    ahead = mine.index(job_id)
    for owner, jobs in lines.items():
        if owner != team:
            ahead += min(len(jobs), int(turns * shares.get(owner, 1.0)))
    return ahead

"""Check units: the checks of running jobs, claimed one at a time by any worker (``worker/run_job.py``).

A unit is queued when its job's session asks for it, running while a worker holds its lease, done
once its verdict is recorded (the unique (job, request id) key makes a second recording of the
same request impossible) and cancelled when its job ended first. Claims are conditional UPDATEs
(``status = 'queued'``), so exactly one worker wins a unit on PostgreSQL and SQLite alike. An
interactive job's check is *asked* instead of queued: a person holds it (no worker claims it, it
counts as no running check) until ``POST /v1/jobs/{id}/verdict`` answers it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, bindparam, exists, func, insert, null, or_, select, update
from sqlalchemy.orm import Session

from checks.requirements import Requirements
from persistence.enums import ACTIVE_STATUSES, JobStatus
from persistence.models import CheckUnit, Job, Team, Worker, utcnow
from persistence.requirements import stored_requirements

QUEUED, RUNNING, DONE, CANCELLED, ASKED = "queued", "running", "done", "cancelled", "asked"
ACTIVE = (QUEUED, RUNNING, ASKED)
FINISH = "finish"  # the kind (and request id) of a finishing job's one unit: store and verify its answer


@dataclass(frozen=True)
class NewUnit:
    """A request of a job's session, as a unit to insert."""

    request_id: str
    kind: str
    number: int
    phase: str
    attempt: int
    speculative: bool
    candidate: dict[str, Any]
    node_count: int


@dataclass(frozen=True)
class InFlight:
    """A running check, as ``GET /v1/jobs/{id}`` and the ``check_started`` event show it."""

    iteration: int
    phase: str
    nodes: int
    worker: str | None
    started_at: datetime | None


@dataclass(frozen=True)
class Work:
    """Something a worker may take: a queued unit of a running job, or a queued job to start."""

    kind: str  # "unit" | "finish" (a finishing job's end) | "job" (to start) | "resume" (running, nobody holds it)
    id: int | str  # the unit's id, or the job's
    job_id: str
    team: str
    job_created: datetime
    number: int
    requires: Requirements  # the job's, as stored at intake (``jobs.requires``): no spec parsed per take


@dataclass(frozen=True)
class JobSurvey:
    """What a worker that has just recorded one of a job's verdicts reads before it queues the
    job's next checks (one statement: ``UnitRepository.survey``)."""

    in_flight: list[str]  # the request ids of the job's queued, running and asked units
    others_waiting: bool | None  # other work for a worker of the queues asked about (None: not asked)


@dataclass(frozen=True)
class TeamLoad:
    running: int  # checks of the team running now
    last_served: datetime | None  # when a check or job of the team was last taken


class UnitRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, job_id: str, units: Sequence[NewUnit], status: str = QUEUED) -> list[int]:
        """The units, ``queued`` for a worker (or ``asked`` of a person: an interactive job's),
        inserted at once in one statement (the session's other pending changes wait for its
        flush); their ids, in order."""
        if not units:
            return []
        values = [
            {
                "job_id": job_id,
                "request_id": u.request_id,
                "kind": u.kind,
                "number": u.number,
                "phase": u.phase,
                "attempt": u.attempt,
                "speculative": u.speculative,
                "candidate": dict(u.candidate),
                "node_count": u.node_count,
                "status": status,
            }
            for u in units
        ]
        statement = insert(CheckUnit).returning(CheckUnit.id, sort_by_parameter_order=True)
        return list(self.session.connection().execute(statement, values).scalars())

    def add_finish(self, job_id: str) -> int:
        """The finishing job's finish unit, queued for any worker (``jobflow.ending.plan_end``)."""
        return self.add(job_id, [NewUnit(FINISH, FINISH, 0, FINISH, 0, False, {}, 0)])[0]

    def active_request_ids(self, job_id: str) -> list[str]:
        """The request ids of the job's queued and running units (the session's ``in_flight``)."""
        query = select(CheckUnit.request_id).where(CheckUnit.job_id == job_id, CheckUnit.status.in_(ACTIVE))
        return list(self.session.scalars(query).all())

    def survey(self, job_id: str, queues: Sequence[str] | None = None, max_attempts: int = 0) -> JobSurvey:
        """The job's units in flight and, with ``queues``, whether anything else waits for a worker
        of them (``_SURVEY_OTHERS``), in one statement (built once). (Request ids hold no space.)"""
        params: dict[str, Any] = {"job_id": job_id}
        if queues is not None:
            params |= {"queues": list(queues), "max_attempts": max_attempts, "now": utcnow()}
        statement = _SURVEY if queues is None else _SURVEY_OTHERS
        in_flight, waiting = self.session.connection().execute(statement, params).one()
        return JobSurvey(in_flight.split(" ") if in_flight else [], None if queues is None else bool(waiting))

    def claim(self, unit_id: int, worker: str, lease_s: float) -> CheckUnit | None:
        """The queued unit ``unit_id``, claimed in one statement; None when another worker took it."""
        return self._claim(CheckUnit.id == unit_id, worker, lease_s)

    def claim_first(self, job_id: str, worker: str, lease_s: float) -> CheckUnit | None:
        """The job's first queued unit (lowest number, the one fair share would pick within the
        job), claimed in one statement; None when none is queued."""
        first = (
            select(CheckUnit.id)
            .where(CheckUnit.job_id == job_id, CheckUnit.status == QUEUED)
            .order_by(CheckUnit.number, CheckUnit.id)
            .limit(1)
            .scalar_subquery()
        )
        return self._claim(CheckUnit.id == first, worker, lease_s)

    def _claim(self, which: Any, worker: str, lease_s: float) -> CheckUnit | None:
        """The queued unit ``which`` selects, running under ``worker``'s lease (a conditional
        UPDATE: exactly one worker wins it), read back by the same statement."""
        now = utcnow()
        claim = (
            update(CheckUnit)
            .where(which, CheckUnit.status == QUEUED)
            .values(status=RUNNING, worker=worker, claimed_at=now, lease_expires_at=now + timedelta(seconds=lease_s))
            .returning(CheckUnit)
        )
        options = {"populate_existing": True, "synchronize_session": False}  # the returned row refreshes the unit
        return self.session.scalars(claim, execution_options=options).first()

    def renew(self, unit_id: int, worker: str, lease_s: float) -> bool:
        """Extend a running unit's lease; False when this worker no longer holds it."""
        expires = utcnow() + timedelta(seconds=lease_s)
        result = self.session.execute(
            update(CheckUnit)
            .where(CheckUnit.id == unit_id, CheckUnit.status == RUNNING, CheckUnit.worker == worker)
            .values(lease_expires_at=expires)
            .returning(CheckUnit.id)
        ).first()
        return result is not None

    def finish_open(self, unit_id: int, duration_s: float) -> bool:
        """The unit, done now (one statement, built once), unless it is done or cancelled already
        (another worker recorded it first, or its job ended): then False."""
        params = {"unit_id": unit_id, "finished_at": utcnow(), "duration_s": duration_s}
        return self.session.connection().execute(_FINISH_OPEN, params).first() is not None

    def finish_late(self, unit_id: int, duration_s: float) -> bool:
        """A check unit whose job's end was planned meanwhile (``cancel_active`` cancelled it, or
        it still runs), done now with its late verdict; False when it is done already (recorded)."""
        done = self.session.execute(
            update(CheckUnit)
            .where(CheckUnit.id == unit_id, CheckUnit.kind != FINISH, CheckUnit.status.in_([RUNNING, CANCELLED]))
            .values(status=DONE, finished_at=utcnow(), duration_s=duration_s, lease_expires_at=None)
            .returning(CheckUnit.id)
        )
        return done.first() is not None

    def finish(self, unit: CheckUnit, duration_s: float) -> None:
        unit.status, unit.finished_at, unit.duration_s, unit.lease_expires_at = DONE, utcnow(), duration_s, None

    def take_asked(self, job_id: str, duration_s: float) -> CheckUnit | None:
        """The unit an interactive job asks a person about (one at a time), done now: its answer
        is being recorded (the caller holds the job's pending iteration); None when none is asked."""
        query = select(CheckUnit).where(CheckUnit.job_id == job_id, CheckUnit.status == ASKED)
        unit = self.session.scalar(query)
        if unit is not None:
            self.finish(unit, duration_s)
        return unit

    def cancel_active(self, job_id: str) -> int:
        """Every queued or running unit of an ended job: cancelled (a running one's worker stops)."""
        result = self.session.execute(
            update(CheckUnit)
            .where(CheckUnit.job_id == job_id, CheckUnit.status.in_(ACTIVE))
            .values(status=CANCELLED, finished_at=utcnow(), lease_expires_at=None)
            .returning(CheckUnit.id)
        )
        return len(result.all())

    def requeue_running(self, job_id: str) -> int:
        """A job taken again after all its workers died: its running units are queued again."""
        result = self.session.execute(
            update(CheckUnit)
            .where(CheckUnit.job_id == job_id, CheckUnit.status == RUNNING)
            .values(status=QUEUED, worker=None, lease_expires_at=None)
            .returning(CheckUnit.id)
        )
        return len(result.all())

    def requeue_expired(self) -> list[tuple[str, str]]:
        """Running units whose worker stopped renewing them (it died), of jobs another worker keeps
        alive (their lease is live; a job nobody keeps alive is taken again as a whole), and a
        finishing job's finish unit (its lease is all that holds the job): queued again.
        Returns (job id, queue) per unit, for the messages that announce them.

        The units are locked without their jobs' rows, so a unit another transaction holds is
        skipped (the next heartbeat looks again) rather than waited for (lock order: retry.py)."""
        now = utcnow()
        query = (
            select(CheckUnit, Job.queue)
            .join(Job, Job.id == CheckUnit.job_id)
            .where(
                CheckUnit.status == RUNNING,
                CheckUnit.lease_expires_at < now,
                or_(
                    Job.status == JobStatus.FINISHING,
                    and_(Job.status == JobStatus.RUNNING, Job.lease_expires_at >= now),
                ),
            )
            .order_by(CheckUnit.id)
            .with_for_update(of=CheckUnit, skip_locked=True)
        )
        requeued: list[tuple[str, str]] = []
        for unit, queue in self.session.execute(query).all():
            if self.session.execute(
                update(CheckUnit)
                .where(CheckUnit.id == unit.id, CheckUnit.status == RUNNING, CheckUnit.lease_expires_at < now)
                .values(status=QUEUED, worker=None, lease_expires_at=None)
                .returning(CheckUnit.id)
            ).first():
                requeued.append((unit.job_id, str(queue)))
        return requeued

    def in_flight(self, job_id: str) -> list[InFlight]:
        query = (
            select(CheckUnit)
            .where(CheckUnit.job_id == job_id, CheckUnit.status == RUNNING, CheckUnit.kind != FINISH)
            .order_by(CheckUnit.number)
        )
        return [
            InFlight(u.number, u.phase, u.node_count, u.worker, u.claimed_at) for u in self.session.scalars(query).all()
        ]

    def running_count(self, job_id: str) -> int:
        query = select(func.count()).where(CheckUnit.job_id == job_id, CheckUnit.status == RUNNING)
        return int(self.session.scalar(query) or 0)

    def mean_duration(self) -> float | None:
        """The mean time of the last finished checks over the farm (for queue estimates)."""
        recent = (
            select(CheckUnit.duration_s)
            .where(CheckUnit.status == DONE, CheckUnit.duration_s.is_not(None))
            .order_by(CheckUnit.finished_at.desc())
            .limit(200)
            .subquery()
        )
        value = self.session.scalar(select(func.avg(recent.c.duration_s)))
        return float(value) if value is not None else None

    # -- fair share --------------------------------------------------------------------------------

    def available_work(self, queues: Sequence[str], max_attempts: int, limit: int = 200) -> list[Work]:
        """What a worker of ``queues`` may take, oldest job first: queued units of running and
        finishing jobs and queued jobs (neither cancel-requested), and running jobs nobody holds
        (their lease ran out and no unit waits: their workers died; cancel-requested or out of
        attempts too, which the claim ends). At most ``limit`` of each kind per team (its oldest),
        so a big job's checks never crowd another team's out of fair share's view. The database
        is the queue: a message only wakes a worker to look here."""
        in_queues = Job.queue.in_(list(queues))
        unit_rows = _oldest_per_team(
            select(
                CheckUnit.id,
                CheckUnit.kind,
                CheckUnit.job_id,
                Team.name,
                Job.created_at,
                CheckUnit.number,
                Job.requires,
            )
            .join(Job, Job.id == CheckUnit.job_id)
            .join(Team, Team.id == Job.team_id)
            .where(
                CheckUnit.status == QUEUED,
                Job.status.in_(list(ACTIVE_STATUSES)),
                Job.cancel_requested.is_(False),
                in_queues,
            ),
            (Job.created_at, Job.id, CheckUnit.number),
            limit,
        )
        job_rows = _oldest_per_team(
            select(Job.id, Team.name, Job.created_at, Job.requires)
            .join(Team, Team.id == Job.team_id)
            .where(
                Job.status == JobStatus.QUEUED,
                Job.cancel_requested.is_(False),
                Job.attempts < max_attempts,
                in_queues,
            ),
            (Job.created_at, Job.id),
            limit,
        )
        # a queued check waits for a worker; an asked one for a person (an interactive job): held
        waiting = exists().where(CheckUnit.job_id == Job.id, CheckUnit.status.in_([QUEUED, ASKED]))
        unheld_rows = _oldest_per_team(
            select(Job.id, Team.name, Job.created_at, Job.requires)
            .join(Team, Team.id == Job.team_id)
            .where(
                Job.status == JobStatus.RUNNING,
                or_(Job.lease_expires_at.is_(None), Job.lease_expires_at < utcnow()),
                ~waiting,
                in_queues,
            ),
            (Job.created_at, Job.id),
            limit,
        )
        units, jobs, unheld = (self.session.execute(rows).all() for rows in (unit_rows, job_rows, unheld_rows))
        work = [
            Work(FINISH if kind == FINISH else "unit", uid, jid, str(team), created, number, stored_requirements(req))
            for uid, kind, jid, team, created, number, req in units
        ]
        work += [
            Work("job", jid, jid, str(team), created, 0, stored_requirements(req)) for jid, team, created, req in jobs
        ]
        work += [
            Work("resume", jid, jid, str(team), created, 0, stored_requirements(req))
            for jid, team, created, req in unheld
        ]
        return work

    def team_loads(self, window_s: float = 86400.0) -> dict[str, TeamLoad]:
        """Per team: its running checks and when it was last served (a check or a job taken) within
        ``window_s`` (a team not served since counts as never served)."""
        since = utcnow() - timedelta(seconds=window_s)
        running = dict(
            self.session.execute(
                select(Team.name, func.count())
                .select_from(CheckUnit)
                .join(Job, Job.id == CheckUnit.job_id)
                .join(Team, Team.id == Job.team_id)
                .where(CheckUnit.status == RUNNING)
                .group_by(Team.name)
            ).all()
        )
        claimed = dict(
            self.session.execute(
                select(Team.name, func.max(CheckUnit.claimed_at))
                .select_from(CheckUnit)
                .join(Job, Job.id == CheckUnit.job_id)
                .join(Team, Team.id == Job.team_id)
                .where(CheckUnit.claimed_at > since)
                .group_by(Team.name)
            ).all()
        )
        started = dict(
            self.session.execute(
                select(Team.name, func.max(Job.started_at))
                .join(Team, Team.id == Job.team_id)
                .where(Job.started_at > since)
                .group_by(Team.name)
            ).all()
        )
        loads: dict[str, TeamLoad] = {}
        for team in set(running) | set(claimed) | set(started):
            moments = [_aware(m) for m in (claimed.get(team), started.get(team)) if m is not None]
            loads[str(team)] = TeamLoad(int(running.get(team, 0)), max(moments) if moments else None)
        return loads

    def team_running_locked(self, team: str) -> int:
        """The team's running checks, counted under the team's row lock (held to the end of the
        transaction), so that two workers claiming for a capped team at once count one another."""
        self.session.execute(select(Team.id).where(Team.name == team).with_for_update())
        query = (
            select(func.count())
            .select_from(CheckUnit)
            .join(Job, Job.id == CheckUnit.job_id)
            .join(Team, Team.id == Job.team_id)
            .where(CheckUnit.status == RUNNING, Team.name == team)
        )
        return int(self.session.scalar(query) or 0)

    def live_workers(self, queue: str, seen_within_s: float) -> int:
        """Workers serving ``queue`` with a heartbeat in the last ``seen_within_s``."""
        since = utcnow() - timedelta(seconds=seen_within_s)
        rows = self.session.scalars(select(Worker.queues).where(and_(Worker.heartbeat_at >= since))).all()
        return sum(1 for queues in rows if queue in (queues or []))


def _oldest_per_team(
    statement: Select[*tuple[Any, ...]], order: tuple[Any, ...], limit: int
) -> Select[*tuple[Any, ...]]:
    """``statement``'s rows (it selects ``Job.created_at``), at most ``limit`` per team: each
    team's first by ``order``; oldest job first."""
    rank = func.row_number().over(partition_by=Job.team_id, order_by=order).label("team_rank")
    ranked = statement.add_columns(rank).subquery()
    columns = [column for column in ranked.c if column.name != "team_rank"]
    return select(*columns).where(ranked.c.team_rank <= limit).order_by(ranked.c.created_at, ranked.c.team_rank)


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes (stored as UTC)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _others_waiting() -> Any:
    """Whether a worker of ``:queues`` has anything to take besides ``:job_id``'s checks (what
    ``available_work`` would list for another job, or a cancelled job to end), as an expression:
    while nothing is, the worker that recorded one of the job's verdicts goes straight on with its
    next check (fair share would pick it anyway)."""
    job_id: Any = bindparam("job_id")
    in_queues = Job.queue.in_(bindparam("queues", expanding=True))
    other_units = exists().where(
        CheckUnit.job_id == Job.id,
        CheckUnit.status == QUEUED,
        Job.id != job_id,
        Job.status.in_(list(ACTIVE_STATUSES)),
        Job.cancel_requested.is_(False),
        in_queues,
    )
    queued_jobs = exists().where(
        Job.status == JobStatus.QUEUED,
        Job.cancel_requested.is_(False),
        Job.attempts < bindparam("max_attempts"),
        in_queues,
    )
    waiting = exists().where(CheckUnit.job_id == Job.id, CheckUnit.status.in_([QUEUED, ASKED]))
    lease_out = or_(Job.lease_expires_at.is_(None), Job.lease_expires_at < bindparam("now"))
    unheld_or_cancelled = exists().where(
        Job.id != job_id,
        Job.status == JobStatus.RUNNING,
        in_queues,
        or_(Job.cancel_requested.is_(True), and_(lease_out, ~waiting)),
    )
    return or_(other_units, queued_jobs, unheld_or_cancelled)


# Statements a worker runs at every verdict, built once (``UnitRepository.survey``, ``finish_open``).
_IN_FLIGHT = (
    select(func.aggregate_strings(CheckUnit.request_id, " "))
    .where(CheckUnit.job_id == bindparam("job_id"), CheckUnit.status.in_(ACTIVE))
    .scalar_subquery()
)
_SURVEY = select(_IN_FLIGHT, null())
_SURVEY_OTHERS = select(_IN_FLIGHT, _others_waiting())
_FINISH_OPEN = (
    update(CheckUnit)
    .where(CheckUnit.id == bindparam("unit_id"), CheckUnit.status.not_in([DONE, CANCELLED]))
    .values(
        status=DONE, finished_at=bindparam("finished_at"), duration_s=bindparam("duration_s"), lease_expires_at=None
    )
    .returning(CheckUnit.id)
)

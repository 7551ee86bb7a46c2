"""``jobflow.recording.record_taken``: what a step of a session took in, recorded in order on a
real (SQLite) database: numbers with no gap, a cached answer marked as such, the job's counters,
one event each."""

from __future__ import annotations

from jobflow.recording import CheckRun, record_taken
from persistence.db import Database
from persistence.enums import EventKind, JobStatus
from persistence.models import Job
from persistence.repositories import EventRepository, IterationRepository, JobRepository, TeamRepository
from reducer_core.candidate import Candidate
from reducer_core.records import IterationRecord
from reducer_core.verdict import Verdict, VerdictKind
from tests.service.helpers import stored_job


def _record(iteration: int, nodes: int, kind: VerdictKind, cached: bool = False) -> IterationRecord:
    candidate = Candidate(frozenset(range(nodes)))
    verdict = Verdict(kind, "sig" if kind is VerdictKind.FAIL else "", "", 0.0 if cached else 0.5)
    fails = kind is VerdictKind.FAIL
    return IterationRecord(iteration, "p", candidate, verdict, fails, cached, nodes, iteration=iteration)


def test_what_a_step_took_in_is_recorded_in_order_with_no_gap(db: Database) -> None:
    with db.session() as session:
        job_id = stored_job(session, TeamRepository(session).get_or_create("team-a").id, JobStatus.RUNNING).id
    taken = [
        _record(1, 8, VerdictKind.FAIL),
        _record(2, 4, VerdictKind.PASS, cached=True),  # the session's cache answered it
        _record(3, 2, VerdictKind.FAIL),
    ]
    with db.session() as session:
        job = JobRepository(session).lock_running(job_id)
        assert job is not None
        before = job.event_seq
        assert record_taken(session, job, [], CheckRun()) == 0  # nothing taken in: no event
        last = record_taken(session, job, taken, CheckRun(output="checked", worker="w1"))
    with db.session() as session:
        rows = IterationRepository(session).list(job_id)
        events = EventRepository(session).after(job_id, before)
        job = session.get(Job, job_id)
        assert job is not None
        assert [(r.number, r.node_count, r.verdict, r.cached) for r in rows] == [
            (1, 8, "fail", None),
            (2, 4, "pass", "job"),
            (3, 2, "fail", None),
        ]
        assert [r.output_tail for r in rows] == ["checked", None, "checked"]  # a cached answer ran nothing
        assert [e.kind for e in events] == [EventKind.ITERATION] * 3 and events[-1].seq == last
        assert (job.iterations_done, job.cache_hits, job.best_size) == (3, 1, 2)

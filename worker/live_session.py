"""A job's session kept live in the worker process between verdicts.

Rebuilding a session from ``jobs.session_state`` replays every earlier verdict (no check runs, but
the cost grows with the job). So the process that advanced a job last keeps the session it
advanced, with the job's ``state_version`` it wrote (bumped under the job's row lock with every
state write: ``jobflow.advance.save``). On the next verdict, under the same lock, the version read from the
row says whether the kept session is the state's: then only the new verdict is applied; otherwise
another worker advanced the job since (or took it over), and the session is rebuilt from the state.

A kept session is handed out once (``take``) and kept again only once the transaction that wrote
its state has committed (``keep_after_commit``): a transaction rolled back (a conflict retried, the
database gone) leaves nothing live, and the next verdict replays."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import event
from sqlalchemy.orm import Session

from engine.session import ReductionSession
from jobflow.stored_state import load_state
from persistence.models import Job
from reducer_core.requests import SessionListener
from worker.prepared import LiveSession, PreparedJob


@dataclass
class SessionStats:
    """How the sessions this process advanced were obtained (what the tests and benches count)."""

    replays: int = 0  # rebuilt from the stored state
    reused: int = 0  # the live session, only the new verdict applied


class LiveSessions:
    """Takes and keeps the live sessions of this process. Each is kept on the prepared job it was
    built on (``PreparedJob.live``: it holds that prepared model; one per thread), so it goes with it."""

    def __init__(self) -> None:
        self.stats = SessionStats()

    def take(self, db: Session, owner: PreparedJob, job: Job, listener: SessionListener) -> ReductionSession:
        """The session of ``job`` (row-locked by the caller) as its stored state is: the kept
        one when its version is the row's, else rebuilt from the state (``jobflow.stored_state``)."""
        kept, owner.live = owner.live, None
        if kept is not None and kept.version == job.state_version:
            self.stats.reused += 1
            kept.session.listen(listener)
            return kept.session
        self.stats.replays += 1
        return owner.session(load_state(db, job), listener)

    def keep_after_commit(self, db: Session, owner: PreparedJob, job: Job, reduction: ReductionSession) -> None:
        """Keep ``reduction`` as the state of version ``job.state_version`` once ``db`` commits."""
        kept = LiveSession(job.state_version, reduction)

        def keep(_: Session) -> None:
            owner.live = kept

        event.listen(db, "after_commit", keep, once=True)


LIVE = LiveSessions()

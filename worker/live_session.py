"""A job's session kept live in the worker process between verdicts.

Rebuilding a session from ``jobs.session_state`` replays every earlier verdict (no check runs, but
the cost grows with the job). So the process that advanced a job last keeps the session it
advanced, with the job's ``state_version`` it wrote (bumped under the job's row lock with every
state write: ``jobflow.advance.save``). On the next verdict, under the same lock, the version read from the
row says whether the kept session is the state's: then only the new verdict is applied; otherwise
another worker advanced the job since (the embedded server's slots are processes that take a job's
checks in turn): the kept session catches up, replaying only the verdicts stored since it last
looked (``jobflow.stored_state.catch_up``); with none kept (or a state it cannot catch up with: a
takeover by a process that never held the job) the session is rebuilt from the state, replaying
them all.

A kept session is handed out once (``take``) and kept again only once the transaction that wrote
its state has committed (``keep_after_commit``): a transaction rolled back (a conflict retried, the
database gone) leaves nothing live, and the next verdict replays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from weakref import WeakKeyDictionary

from sqlalchemy import event
from sqlalchemy.orm import Session

from engine.session import ReductionSession
from jobflow.stored_state import catch_up, load_state_seen
from persistence.models import Job
from reducer_core.requests import SessionListener


@dataclass(frozen=True)
class LiveSession:
    """The job's session as version ``version`` of its row's state left it."""

    version: int
    session: ReductionSession
    seen: int = 0  # the last verdict row (``session_verdicts.id``) the session has read (0: none)


class SessionOwner(Protocol):
    """What a live session is kept on: the prepared job it was built on (``worker.prepared.PreparedJob``)."""

    live: LiveSession | None

    def session(self, state: dict[str, Any] | None, listener: SessionListener | None = None) -> ReductionSession:
        """The job's session rebuilt from ``state``."""
        ...


@dataclass
class SessionStats:
    """How the sessions this process advanced were obtained (what the tests and benches count)."""

    replays: int = 0  # rebuilt from the stored state
    reused: int = 0  # the live session, only the new verdict applied
    caught_up: int = 0  # the live session, the verdicts other processes stored since replayed first


class LiveSessions:
    """Takes and keeps the live sessions of this process (``RunnerContext.live``: one per context).
    Each is kept on the prepared job it was built on (``PreparedJob.live``: it holds that prepared
    model; one per thread), so it goes with it."""

    def __init__(self) -> None:
        self.stats = SessionStats()
        self._seen: WeakKeyDictionary[ReductionSession, int] = WeakKeyDictionary()  # its last verdict row read

    def take(self, db: Session, owner: SessionOwner, job: Job, listener: SessionListener) -> ReductionSession:
        """The session of ``job`` (row-locked by the caller) as its stored state is: the kept
        one when its version is the row's, the kept one caught up when the row's is later, else
        rebuilt from the state (``jobflow.stored_state``)."""
        kept, owner.live = owner.live, None
        if kept is not None and kept.version == job.state_version:
            self.stats.reused += 1
            kept.session.listen(listener)
            return kept.session
        if kept is not None and kept.version < (job.state_version or 0):
            seen = catch_up(db, job, kept.session, kept.seen)
            if seen is not None:
                self.stats.caught_up += 1
                self._seen[kept.session] = seen
                kept.session.listen(listener)
                return kept.session
        self.stats.replays += 1
        state, seen = load_state_seen(db, job)
        reduction = owner.session(state, listener)
        self._seen[reduction] = seen
        return reduction

    def keep_after_commit(self, db: Session, owner: SessionOwner, job: Job, reduction: ReductionSession) -> None:
        """Keep ``reduction`` as the state of version ``job.state_version`` once ``db`` commits."""
        kept = LiveSession(job.state_version, reduction, self._seen.get(reduction, 0))

        def keep(_: Session) -> None:
            owner.live = kept

        event.listen(db, "after_commit", keep, once=True)

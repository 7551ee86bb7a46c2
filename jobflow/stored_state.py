"""A job's saved session, as the service stores it: ``jobs.session_state`` is the session's state
(``reducer_core.state``) without its verdict cache's entries, which live one row each in
``session_verdicts``. Saving after a verdict writes the small state and only the entries the
session learnt since its last save, so a save costs the same at check 2,000 as at check 10;
loading puts the entries back, so the state read is the one the session saved.

Which entries a session object has saved is remembered with the object (``saved_mark``; a session
rebuilt after a rollback or a takeover is a new object: its first save reads what is stored).

A session kept live by a process that did not record the job's last verdicts (the embedded
server's two slots are two processes taking a job's checks in turn) catches up (``catch_up``):
it reads only the entries stored since the last row it saw and replays only those, so a verdict
costs the same at check 1,500 as at check 10 (a rebuild, ``load_state``, reads and replays them
all)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from engine.session import ReductionSession
from persistence.models import Job
from persistence.repositories.session_verdicts import SessionVerdictRepository
from reducer_core.machine import ReductionMachine


def save_state(db: Session, job: Job, reduction: ReductionSession) -> None:
    """``reduction``'s state with the job (its row locked by the caller); the verdict entries
    added or changed since its last save as rows (after a rebuild: those the rows lack)."""
    cache = reduction.machine.cache
    mark = reduction.saved_mark
    verdicts = SessionVerdictRepository(db)
    if mark is None:
        stored = verdicts.of_job(job.id)
        held = cache.to_json()["verdicts"]  # a rebuilt session's: loaded from the rows, or inline
        new = {key: value for key, value in held.items() if stored.get(key) != value}
    else:
        new = cache.changed_since(mark)
    verdicts.put(job.id, new)
    reduction.saved_mark = cache.mark
    job.session_state = reduction.state(verdicts=False)


def load_state(db: Session, job: Job) -> dict[str, Any] | None:
    """The state ``save_state`` saved, its verdict entries back in place (a state saved before the
    entries had rows of their own holds them inline: kept, the rows win)."""
    return load_state_seen(db, job)[0]


def load_state_seen(db: Session, job: Job) -> tuple[dict[str, Any] | None, int]:
    """``load_state``, and the id of the last verdict row it read (0: none), from which a session
    built on it catches up later (``catch_up``)."""
    state = job.session_state
    cache = state.get("cache") if state is not None else None
    if state is None or not isinstance(cache, dict):
        return state, 0
    stored, seen = SessionVerdictRepository(db).since(job.id, 0)
    if not stored:
        return state, seen
    return {**state, "cache": {**cache, "verdicts": {**(cache.get("verdicts") or {}), **stored}}}, seen


def catch_up(db: Session, job: Job, reduction: ReductionSession, seen: int) -> int | None:
    """Bring ``reduction`` (kept live at an earlier state of ``job``, having seen the verdict rows
    up to id ``seen``) to the job's stored state by replaying only the entries stored since
    (``ReductionMachine.catch_up``); the id of the last row seen now. None when it cannot (a state
    of another shape: the caller rebuilds the session, ``load_state``)."""
    state = job.session_state
    machine = reduction.machine
    if not isinstance(state, dict) or not isinstance(state.get("cache"), dict) or state["cache"].get("verdicts"):
        return None  # no state, or one with its entries inline (saved before they had rows)
    if type(machine) is not ReductionMachine or (state.get("counters") or {}).get("checks_run", 0) < machine.checks_run:
        return None  # a precision session replays its own flow; a state behind this session: not a later one
    stored, last = SessionVerdictRepository(db).since(job.id, seen)
    machine.catch_up(stored, state)
    return last

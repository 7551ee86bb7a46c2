"""A job's saved session, as the service stores it: ``jobs.session_state`` is the session's state
(``reducer_core.state``) without its verdict cache's entries, which live one row each in
``session_verdicts``. Saving after a verdict writes the small state and only the entries the
session learnt since its last save, so a save costs the same at check 2,000 as at check 10;
loading puts the entries back, so the state read is the one the session saved.

Which entries a session object has saved is remembered with the object (a session rebuilt after
a rollback or a takeover is a new object: its first save reads what is stored)."""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy.orm import Session

from engine.session import ReductionSession
from persistence.models import Job
from persistence.repositories.session_verdicts import SessionVerdictRepository

_SAVED: WeakKeyDictionary[ReductionSession, int] = WeakKeyDictionary()  # the cache's mark at its last save


def save_state(db: Session, job: Job, reduction: ReductionSession) -> None:
    """``reduction``'s state with the job (its row locked by the caller); the verdict entries
    added or changed since its last save as rows (after a rebuild: those the rows lack)."""
    cache = reduction.machine.cache
    mark = _SAVED.get(reduction)
    verdicts = SessionVerdictRepository(db)
    if mark is None:
        stored = verdicts.of_job(job.id)
        held = cache.to_json()["verdicts"]  # a rebuilt session's: loaded from the rows, or inline
        new = {key: value for key, value in held.items() if stored.get(key) != value}
    else:
        new = cache.changed_since(mark)
    verdicts.put(job.id, new)
    _SAVED[reduction] = cache.mark
    job.session_state = reduction.state(verdicts=False)


def load_state(db: Session, job: Job) -> dict[str, Any] | None:
    """The state ``save_state`` saved, its verdict entries back in place (a state saved before the
    entries had rows of their own holds them inline: kept, the rows win)."""
    state = job.session_state
    cache = state.get("cache") if state is not None else None
    if state is None or not isinstance(cache, dict):
        return state
    stored = SessionVerdictRepository(db).of_job(job.id)
    if not stored:
        return state
    return {**state, "cache": {**cache, "verdicts": {**(cache.get("verdicts") or {}), **stored}}}

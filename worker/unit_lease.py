"""The leases this process holds, renewed from one thread: the check units it runs, and the jobs
it starts (``hold_start``: the attempt's lease while a big model loads, until its first checks
are queued; a renewal that finds the job no longer held by that attempt sets ``lost``).

A unit is this worker's while its lease runs (``UnitRepository.claim``); while its check runs the
lease is renewed, and its job kept alive, every third of the lease. One thread per process does it
for every unit held (an embedded server runs several at once): it starts with the first unit held
and ends at a renewal that finds none, so a worker running checks one after another keeps one
thread instead of starting and joining one per check. A renewal that finds the unit no longer this
worker's (its lease ran out and another worker took it, or its job ended) sets the unit's ``lost``
event: the check is stopped.

Each renewal runs on a small pool, so one that blocks (its job's row locked by a long
transaction, a slow connection) holds up neither the other units' renewals nor their release: a
unit whose renewal still runs is skipped in the next round, and ``release`` waits for its own
unit's renewal only."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.orm import Session

from persistence.db import Database
from persistence.repositories import JobRepository
from persistence.repositories.units import UnitRepository
from persistence.retry import sqlstate_of

log = logging.getLogger("onnx_reducer.worker")
MIN_INTERVAL_S = 0.05
RENEWERS = 4  # renewals run at once (one blocked leaves the others going)


class LeaseTerms(Protocol):
    """What renewing a lease reads of the worker's context (``worker.context.RunnerContext``)."""

    db: Database
    lease_s: float
    worker: str


@dataclass(frozen=True, eq=False)
class HeldUnit:
    """One hold of a unit (a process may hold the same unit twice: two slots, after its first
    lease ran out and it was queued again; each releases its own)."""

    unit_id: int | None  # None: a job's start, its attempt's lease (``LeaseKeeper.hold_start``)
    job_id: str
    lost: threading.Event
    attempt: int = 0
    renewing: threading.Lock = field(default_factory=threading.Lock)  # held while its lease is renewed


class LeaseKeeper:
    """The process's held units and the thread renewing their leases (module doc): one per
    context (``RunnerContext.leases``; an embedded slot has its own), renewing under its terms
    (the worker's name and lease, read at each renewal)."""

    def __init__(self, terms: LeaseTerms) -> None:
        self.terms = terms
        self.start_afresh()
        _KEEPERS.add(self)

    def start_afresh(self) -> None:
        """No unit held, no thread (also what a forked child does: it has none of its parent's
        threads, and perhaps a lock one of them held)."""
        self._lock = threading.Lock()
        self._held: set[HeldUnit] = set()
        self._changed = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None

    def hold(self, unit_id: int, job_id: str) -> HeldUnit:
        """Renew the unit's lease until ``release``; its ``lost`` event is set if it is lost."""
        return self._hold(HeldUnit(unit_id, job_id, threading.Event()))

    def hold_start(self, job_id: str, attempt: int) -> HeldUnit:
        """Renew the lease of ``attempt`` at ``job_id`` (a job being started) until ``release``."""
        return self._hold(HeldUnit(None, job_id, threading.Event(), attempt))

    def _hold(self, held: HeldUnit) -> HeldUnit:
        with self._lock:
            self._held.add(held)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="unit-leases", daemon=True)
                self._thread.start()
        self._changed.set()  # the thread, perhaps waiting out a round with nothing held, looks again
        return held

    @property
    def renewing(self) -> bool:
        """Whether the renewal thread runs (it ends once no unit is held)."""
        with self._lock:
            return self._thread is not None

    def release(self, held: HeldUnit) -> None:
        """No renewal of ``held`` starts after this returns, and none is under way (so nothing
        touches its database once its check is over: a test may dispose of it); another unit's
        renewal is not waited for."""
        with held.renewing, self._lock:
            self._held.discard(held)

    def _run(self) -> None:
        try:
            self._renew_while_held()
        except Exception:
            log.exception("renewing the leases of running checks stopped; the next check starts it again")
        finally:
            with self._lock:
                if self._thread is threading.current_thread():  # (a normal end let go under the lock already)
                    self._thread = None

    def _renew_while_held(self) -> None:
        due_at = math.inf  # the next round of renewals
        while True:
            with self._lock:
                if not self._held:
                    self._thread = None
                    return
                interval = max(self.terms.lease_s / 3, MIN_INTERVAL_S)
                self._changed.clear()
            due_at = min(due_at, time.monotonic() + interval)  # a unit held since: no later than its lease asks
            if self._changed.wait(max(due_at - time.monotonic(), 0.0)):
                continue
            self._renew_round(interval)
            due_at = math.inf

    def _renew_round(self, interval: float) -> None:
        """Every held unit's renewal, on the pool; waits for them up to ``interval`` (one still
        blocked goes on alone). A bug in a renewal ends the thread (``_run`` logs it)."""
        with self._lock:
            held_now = [h for h in self._held if not h.renewing.locked()]
            if self._pool is None:
                self._pool = ThreadPoolExecutor(RENEWERS, thread_name_prefix="unit-lease")
            pool = self._pool
        futures: list[Future[None]] = [pool.submit(self._renew_if_held, held) for held in held_now]
        done, _ = wait(futures, timeout=interval)
        for future in done:
            future.result()

    def _renew_if_held(self, held: HeldUnit) -> None:
        if not held.renewing.acquire(blocking=False):
            return  # its last renewal still runs
        try:
            with self._lock:
                if held not in self._held:
                    return  # released since the round began
            if _renew(self.terms, held):
                return
            held.lost.set()
            with self._lock:
                self._held.discard(held)
        finally:
            held.renewing.release()


def _renew(terms: LeaseTerms, held: HeldUnit) -> bool:
    """One renewal of the unit's lease (its job's row before its unit's: ``persistence/retry.py``);
    False when this worker no longer holds it. A failed renewal is logged and tried again at the
    next round (the lease may run out meanwhile)."""
    try:
        with terms.db.session() as session:
            if held.unit_id is None:
                return _renew_start(session, held, terms.lease_s)
            JobRepository(session).keep_alive(held.job_id, terms.lease_s)
            return UnitRepository(session).renew(held.unit_id, terms.worker, terms.lease_s)
    except Exception as exc:  # noqa: BLE001 - the database is down or a conflict: retried, the lease may run out
        state = sqlstate_of(exc)
        log.warning(
            "job %s: renewing the lease of a check failed (%s%s); retrying",
            *(held.job_id, type(exc).__name__, f", SQLSTATE {state}" if state else ""),
        )
        return True


def _renew_start(session: Session, held: HeldUnit, lease_s: float) -> bool:
    """The started job's lease, as long as its attempt holds it."""
    if JobRepository(session).renew_lease(held.job_id, lease_s, held.attempt):
        return True
    log.warning("job %s: attempt %d no longer holds the job", held.job_id, held.attempt)
    return False


def _start_afresh_after_fork() -> None:
    """A forked child holds none of its parent's units: every keeper it inherited starts afresh."""
    for keeper in list(_KEEPERS):
        keeper.start_afresh()


_KEEPERS: weakref.WeakSet[LeaseKeeper] = weakref.WeakSet()  # the keepers alive, for a fork only
os.register_at_fork(after_in_child=_start_afresh_after_fork)

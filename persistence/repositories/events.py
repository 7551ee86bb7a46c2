"""Job events: rows with a per-job sequence number (the SSE stream replays them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from persistence.enums import EventKind
from persistence.models import Event, Job


class EventRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def append(self, job_id: str, kind: EventKind, payload: Mapping[str, Any]) -> Event:
        """Take the job's next sequence number (row-locked by the UPDATE) and store the event."""
        seq = self.session.execute(
            update(Job).where(Job.id == job_id).values(event_seq=Job.event_seq + 1).returning(Job.event_seq)
        ).scalar_one()
        event = Event(job_id=job_id, seq=seq, kind=kind.value, payload=dict(payload))
        self.session.add(event)
        self.session.flush()
        return event

    def append_locked(self, job: Job, kind: EventKind, payload: Mapping[str, Any]) -> Event:
        """The same, for a job whose row the caller holds locked (``JobRepository.lock_running``):
        the number is taken from the row in memory and written with its other changes; the
        event's row is inserted at the next flush."""
        job.event_seq += 1
        event = Event(job_id=job.id, seq=job.event_seq, kind=kind.value, payload=dict(payload))
        self.session.add(event)
        return event

    def after(self, job_id: str, seq: int, limit: int = 500) -> Sequence[Event]:
        query = select(Event).where(Event.job_id == job_id, Event.seq > seq).order_by(Event.seq).limit(limit)
        return self.session.scalars(query).all()

"""SQLAlchemy 2 models. Portable types only (PostgreSQL in production, SQLite embedded)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, false
from sqlalchemy import UniqueConstraint as Unique
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from persistence.enums import JobStatus


def new_id() -> str:
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


class JobStatusType(TypeDecorator[JobStatus]):
    """A job's status: stored as its text (``String(16)``, as before), read as ``JobStatus``."""

    impl = String(16)
    cache_ok = True

    def process_bind_param(self, value: JobStatus | str | None, dialect: Dialect) -> str | None:
        return None if value is None else JobStatus(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> JobStatus | None:
        return None if value is None else JobStatus(value)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, datetime: DateTime(timezone=True)}


class Team(Base):
    __tablename__ = "teams"
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiToken(Base):
    __tablename__ = "api_tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    name: Mapped[str] = mapped_column(String(100), default="", server_default="")  # what it is for
    admin: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())  # manages tokens


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Unique("team_id", "idempotency_key", name="uq_jobs_team_idempotency_key"),
        Index("ix_jobs_team_created", "team_id", "created_at", "id"),
    )
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    status: Mapped[JobStatus] = mapped_column(JobStatusType(), index=True)
    queue: Mapped[str] = mapped_column(String(32))
    mode: Mapped[str] = mapped_column(String(16))
    options: Mapped[dict[str, Any]] = mapped_column(default=dict)
    check_spec: Mapped[str] = mapped_column(Text)
    check_kind: Mapped[str] = mapped_column(String(32))
    # the spec's ``requires`` (``checks.requirements.Requirements`` JSON; {}: any worker), stored at intake
    requires: Mapped[dict[str, Any]] = mapped_column(default=dict, server_default="{}")
    # the spec normalised at intake (``CheckSpec.to_json``; read by ``persistence.stored_spec``); None:
    # interactive, or a text that no longer parsed when migration 0014 back-filled it
    spec: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), default=None)
    model_filename: Mapped[str] = mapped_column(String(255))
    model_sha256: Mapped[str] = mapped_column(String(64))
    model_size: Mapped[int] = mapped_column(BigInteger)
    model_path: Mapped[str] = mapped_column(String(500))
    nodes_before: Mapped[int | None] = mapped_column(default=None)
    nodes_after: Mapped[int | None] = mapped_column(default=None)
    best_size: Mapped[int | None] = mapped_column(default=None)
    iterations_done: Mapped[int] = mapped_column(default=0)
    checks_run: Mapped[int] = mapped_column(default=0)
    check_time_s: Mapped[float] = mapped_column(Float, default=0.0)
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)
    error_message: Mapped[str | None] = mapped_column(Text, default=None)
    attempts: Mapped[int] = mapped_column(default=0)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    # ReductionSession.state(): bulky, so loaded only when read (a worker with the session live never reads it)
    session_state: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None, deferred=True)
    state_version: Mapped[int] = mapped_column(default=0, server_default="0")  # bumped with each session_state write
    event_seq: Mapped[int] = mapped_column(default=0)
    cache_hits: Mapped[int] = mapped_column(default=0, server_default="0")  # every cached answer
    farm_hits: Mapped[int] = mapped_column(default=0, server_default="0")  # those from the farm's verdicts
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class Iteration(Base):
    __tablename__ = "iterations"
    __table_args__ = (Unique("job_id", "number", name="uq_iterations_job_number"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column()
    phase: Mapped[str] = mapped_column(String(32))
    fingerprint: Mapped[str] = mapped_column(String(64))
    node_count: Mapped[int] = mapped_column()
    pending: Mapped[bool] = mapped_column(Boolean, default=True)
    verdict: Mapped[str | None] = mapped_column(String(16), default=None)
    signature: Mapped[str | None] = mapped_column(Text, default=None)
    detail: Mapped[str | None] = mapped_column(Text, default=None)
    reproduces: Mapped[bool | None] = mapped_column(Boolean, default=None)
    duration_s: Mapped[float | None] = mapped_column(Float, default=None)
    output_tail: Mapped[str | None] = mapped_column(Text, default=None)
    artifact_id: Mapped[str | None] = mapped_column(ForeignKey("artifacts.id", ondelete="SET NULL"), default=None)
    # None: the check ran; "job": answered from the job's own verdicts; "farm": from the farm's
    cached: Mapped[str | None] = mapped_column(String(8), default=None)
    # a speculative check's verdict that landed after the job's end was planned: kept, not the answer
    late: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None, index=True)


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (Unique("job_id", "seq", name="uq_events_job_seq"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    seq: Mapped[int] = mapped_column()
    kind: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Artifact(Base):
    __tablename__ = "artifacts"
    __table_args__ = (Unique("job_id", "kind", "name", name="uq_artifacts_job_kind_name"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    storage_key: Mapped[str] = mapped_column(String(200))
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class CheckUnit(Base):
    """One check of a job that any worker may claim (``worker/run_job.py``): the session's request,
    its iteration number and candidate; queued, running (a worker holds it until ``lease_expires_at``),
    done (its verdict recorded, once: the recording worker holds the job's row lock and skips a unit
    already done) or cancelled. A request may come again after its unit ended (a retried job, an
    infrastructure error checked ahead), so the request id is not unique."""

    __tablename__ = "check_units"
    __table_args__ = (Index("ix_check_units_status_job", "status", "job_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    request_id: Mapped[str] = mapped_column(String(120))
    kind: Mapped[str] = mapped_column(String(16))  # check | layerwise
    number: Mapped[int] = mapped_column(default=0)  # the number it runs under (its event's started_as)
    phase: Mapped[str] = mapped_column(String(32))
    attempt: Mapped[int] = mapped_column(default=0)
    speculative: Mapped[bool] = mapped_column(Boolean, default=False)
    candidate: Mapped[dict[str, Any]] = mapped_column(default=dict)  # Candidate.to_json(); {} for layerwise
    node_count: Mapped[int] = mapped_column(default=0)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    worker: Mapped[str | None] = mapped_column(String(200), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    claimed_at: Mapped[datetime | None] = mapped_column(default=None, index=True)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    duration_s: Mapped[float | None] = mapped_column(Float, default=None)


class Worker(Base):
    """A worker process that announced itself (``worker/presence.py``); its heartbeat refreshes the
    row, a clean stop removes it, and a row without a heartbeat for long is dropped."""

    __tablename__ = "workers"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    queues: Mapped[list[str]] = mapped_column(JSON, default=list)
    capabilities: Mapped[dict[str, Any]] = mapped_column(default=dict)
    current_job_id: Mapped[str | None] = mapped_column(String(32), default=None)
    busy_since: Mapped[datetime | None] = mapped_column(default=None)
    busy_s: Mapped[float] = mapped_column(Float, default=0.0)  # busy time before ``busy_since``
    jobs_done: Mapped[int] = mapped_column(default=0)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class FarmVerdict(Base):
    """A verdict shared across jobs (``worker/farm_cache.py``): ``scope`` digests everything a
    verdict depends on besides the candidate (model, check, options, runtime), ``fingerprint`` is
    the candidate's. One row per team; other teams read it only when the operator allows it."""

    __tablename__ = "farm_verdicts"
    __table_args__ = (
        Unique("team_id", "scope", "fingerprint", name="uq_farm_verdicts_team_scope_fingerprint"),
        Index("ix_farm_verdicts_scope", "scope"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    scope: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[str] = mapped_column(String(64))
    verdict: Mapped[dict[str, Any]] = mapped_column()
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SessionVerdict(Base):
    """One entry of a job's verdict cache (``reducer_core.cache``: the key is the candidate's
    fingerprint, with ``~<repeat>`` for a re-check), kept beside ``jobs.session_state`` rather than
    inside it: a verdict is written once, when the session learns it, so saving the state after
    each verdict costs the same at check 2,000 as at check 10 (``jobflow.stored_state``)."""

    __tablename__ = "session_verdicts"
    __table_args__ = (Unique("job_id", "key", name="uq_session_verdicts_job_key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(80))
    verdict: Mapped[dict[str, Any]] = mapped_column()


class JobLabel(Base):
    """A label a job was submitted with (``key=value``: the CI context ``onnx-reducer submit``
    picks up, or ``--label``); indexed by key and value so the jobs list filters on it."""

    __tablename__ = "job_labels"
    __table_args__ = (
        Unique("job_id", "key", name="uq_job_labels_job_key"),
        Index("ix_job_labels_key_value", "key", "value"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(63))
    value: Mapped[str] = mapped_column(String(1024))


class AuditEvent(Base):
    """A team's audit record: a token created or revoked, a job deleted; who did it (the acting
    token's prefix, or ``cli`` for the server's command line) and to what."""

    __tablename__ = "audit_events"
    __table_args__ = (Index("ix_audit_events_team_id_id", "team_id", "id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    action: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str] = mapped_column(String(120))
    target: Mapped[str] = mapped_column(String(200))
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookEndpoint(Base):
    """A URL a team registered for its jobs' events (``persistence.webhooks``): the event types
    it wants and the secret its deliveries are signed with (Standard Webhooks: ``whsec_`` +
    base64; shown once, when it is created)."""

    __tablename__ = "webhook_endpoints"
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(String(2000))
    events: Mapped[list[str]] = mapped_column(JSON, default=list)
    secret: Mapped[str] = mapped_column(String(120))
    description: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    disabled_at: Mapped[datetime | None] = mapped_column(default=None)  # its receiver answered 410 Gone
    disabled_reason: Mapped[str | None] = mapped_column(String(300), default=None)


class WebhookDelivery(Base):
    """One event for one endpoint: the outbox row a worker delivers (``worker.webhooks``) and its
    log. ``id`` is the ``webhook-id`` of every attempt and ``body`` the bytes each one signs and
    sends; ``next_attempt_at`` is when it is due, and while a worker delivers it (``delivering``)
    the end of that worker's lease: a worker killed mid-delivery leaves it to be sent again."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_endpoint_created", "endpoint_id", "created_at"),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("webhook_endpoints.id", ondelete="CASCADE"))
    job_id: Mapped[str | None] = mapped_column(String(32), default=None)
    event_type: Mapped[str] = mapped_column(String(40))
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending|delivering|succeeded|failed
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_status_code: Mapped[int | None] = mapped_column(default=None)
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_attempt_at: Mapped[datetime | None] = mapped_column(default=None)
    delivered_at: Mapped[datetime | None] = mapped_column(default=None)

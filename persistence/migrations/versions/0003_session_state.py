"""jobs.session_state replaces strategy_state and verdict_cache

The service now stores a job's ``ReductionSession.state()`` (the verdict cache, the layerwise
run's result, counters). A job stored before keeps its finished checks: its verdict cache becomes
the state ``{"cache": ...}``, from which a session resumes (it replays its flow against those
verdicts). The strategy state is not needed: the strategy is replayed from the verdicts.

Revision ID: session_state
Revises: farm_workers_and_dispatch
Create Date: 2026-11-28 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "session_state"
down_revision: str | None = "farm_workers_and_dispatch"

_jobs = sa.table(
    "jobs",
    sa.column("id", sa.String),
    sa.column("verdict_cache", sa.JSON),
    sa.column("session_state", sa.JSON),
)


def upgrade() -> None:
    op.add_column("jobs", sa.Column("session_state", sa.JSON(), nullable=True))
    connection = op.get_bind()
    for job_id, cache in connection.execute(sa.select(_jobs.c.id, _jobs.c.verdict_cache)).all():
        if cache:
            connection.execute(_jobs.update().where(_jobs.c.id == job_id).values(session_state={"cache": cache}))
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("verdict_cache")
        batch.drop_column("strategy_state")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("strategy_state", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("verdict_cache", sa.JSON(), nullable=True))
    connection = op.get_bind()
    for job_id, state in connection.execute(sa.select(_jobs.c.id, _jobs.c.session_state)).all():
        if state and state.get("cache"):
            connection.execute(_jobs.update().where(_jobs.c.id == job_id).values(verdict_cache=state["cache"]))
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("session_state")

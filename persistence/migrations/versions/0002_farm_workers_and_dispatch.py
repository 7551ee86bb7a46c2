"""farm: the workers table, jobs.dispatched_at and jobs.cache_hits, an index on iterations.finished_at

Revision ID: farm_workers_and_dispatch
Revises: 0001
Create Date: 2026-11-28 10:00:00

``workers``: one row per worker process (heartbeat, queues, capabilities, current job), for
``GET /v1/workers``, farm metrics and capability routing. ``jobs.dispatched_at``: when a message
for the job was last sent (None: parked for a capable worker), so that idle workers re-send only
jobs whose message is lost. ``jobs.cache_hits``: verdicts answered from the cache. The index on
``iterations.finished_at`` serves the checks-per-second metric.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from persistence.migration_columns import moment, row_id, text

revision: str = "farm_workers_and_dispatch"
down_revision: str | None = "0001"


def upgrade() -> None:
    op.create_table(
        "workers",
        text("name", 200),
        text("host", 255),
        sa.Column("queues", sa.JSON(), nullable=False),
        sa.Column("capabilities", sa.JSON(), nullable=False),
        row_id("current_job_id", nullable=True),
        moment("busy_since", nullable=True),
        sa.Column("busy_s", sa.Float(), nullable=False),
        sa.Column("jobs_done", sa.Integer(), nullable=False),
        moment("started_at", nullable=False),
        moment("heartbeat_at", nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_workers_heartbeat_at"), ["heartbeat_at"], unique=False)
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cache_hits", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(moment("dispatched_at", nullable=True))
    with op.batch_alter_table("iterations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_iterations_finished_at"), ["finished_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("iterations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_iterations_finished_at"))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("dispatched_at")
        batch_op.drop_column("cache_hits")
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_workers_heartbeat_at"))
    op.drop_table("workers")

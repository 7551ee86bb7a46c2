"""jobs.dispatched_at goes: dispatch is through the database, a message only wakes a worker

Revision ID: drop_dispatched_at
Revises: state_version
Create Date: 2026-11-26 20:20:00

Since workers take their jobs from the database (``worker/run_job.py``) nothing reads the column
and nothing but its default writes it. A downgrade adds it back, empty (as 0002 added it).
"""

from __future__ import annotations

from alembic import op

from persistence.migration_columns import moment

revision: str = "drop_dispatched_at"
down_revision: str | None = "state_version"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("dispatched_at")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(moment("dispatched_at", nullable=True))

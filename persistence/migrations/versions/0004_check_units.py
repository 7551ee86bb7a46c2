"""check_units: one row per check of a job, claimed by any worker (a job's checks spread over the farm)

Revision ID: check_units
Revises: session_state
Create Date: 2026-11-23 13:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "check_units"
down_revision: str | None = "session_state"


def upgrade() -> None:
    op.create_table(
        "check_units",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("request_id", sa.String(120), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("speculative", sa.Boolean(), nullable=False),
        sa.Column("candidate", sa.JSON(), nullable=False),
        sa.Column("node_count", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
    )
    op.create_index("ix_check_units_job_id", "check_units", ["job_id"])
    op.create_index("ix_check_units_status_job", "check_units", ["status", "job_id"])
    op.create_index("ix_check_units_claimed_at", "check_units", ["claimed_at"])


def downgrade() -> None:
    op.drop_index("ix_check_units_claimed_at", table_name="check_units")
    op.drop_index("ix_check_units_status_job", table_name="check_units")
    op.drop_index("ix_check_units_job_id", table_name="check_units")
    op.drop_table("check_units")

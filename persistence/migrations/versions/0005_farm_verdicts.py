"""farm verdict cache: the farm_verdicts table, iterations.cached and jobs.farm_hits

Revision ID: farm_verdicts
Revises: check_units
Create Date: 2026-11-23 13:30:00

``farm_verdicts``: verdicts shared across jobs, keyed by team, scope (model, check, options and
the runtime that ran the check) and candidate fingerprint (``worker/farm_cache.py``).
``iterations.cached``: a row answered without a check (``job``: from the job's own verdicts,
``farm``: from the farm's). ``jobs.farm_hits``: how many of a job's cache hits came from the farm.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from persistence.migration_columns import cascade_from, create_numbered_table, created_at, row_id, text

revision: str = "farm_verdicts"
down_revision: str | None = "check_units"


def upgrade() -> None:
    create_numbered_table(
        "farm_verdicts",
        row_id("team_id"),
        text("scope", 64),
        text("fingerprint", 64),
        sa.Column("verdict", sa.JSON(), nullable=False),
        row_id("job_id", nullable=True),
        created_at(),
        cascade_from("team_id", "teams"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="SET NULL"),
        sa.UniqueConstraint("team_id", "scope", "fingerprint", name="uq_farm_verdicts_team_scope_fingerprint"),
    )
    op.create_index("ix_farm_verdicts_scope", "farm_verdicts", ["scope"], unique=False)
    with op.batch_alter_table("iterations") as batch:
        batch.add_column(text("cached", 8, nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("farm_hits", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("farm_hits")
    with op.batch_alter_table("iterations") as batch:
        batch.drop_column("cached")
    op.drop_index("ix_farm_verdicts_scope", table_name="farm_verdicts")
    op.drop_table("farm_verdicts")

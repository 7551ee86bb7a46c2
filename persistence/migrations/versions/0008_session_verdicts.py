"""session_verdicts: a job's verdict cache, one row a verdict, beside jobs.session_state

Revision ID: session_verdicts
Revises: drop_dispatched_at
Create Date: 2026-11-26 21:30:00

The state saved after each verdict held the whole verdict cache, so writing it grew with the job
(about 65 KB at 600 checks). The cache's entries now live here, written once each
(``jobflow.stored_state``); a state saved before keeps its entries inline, and they move here with
the job's next save.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from persistence.migration_columns import cascade_from, create_numbered_table, row_id, text

revision: str = "session_verdicts"
down_revision: str | None = "drop_dispatched_at"


def upgrade() -> None:
    create_numbered_table(
        "session_verdicts",
        row_id("job_id"),
        text("key", 80),
        sa.Column("verdict", sa.JSON(), nullable=False),
        cascade_from("job_id", "jobs"),
        sa.UniqueConstraint("job_id", "key", name="uq_session_verdicts_job_key"),
    )


def downgrade() -> None:
    op.drop_table("session_verdicts")

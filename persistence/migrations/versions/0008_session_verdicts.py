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

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "session_verdicts"
down_revision: str | None = "drop_dispatched_at"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "session_verdicts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("key", sa.String(length=80), nullable=False),
        sa.Column("verdict", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "key", name="uq_session_verdicts_job_key"),
    )


def downgrade() -> None:
    op.drop_table("session_verdicts")

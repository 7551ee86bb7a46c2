"""late iterations: a verdict that lands after the job's end is planned

Revision ID: late_iterations
Revises: webhooks
Create Date: 2026-11-27 22:38:00

``iterations.late``: the verdict of a speculative check that finished after the search was done
(the job ``finishing`` or its end planned): recorded as an iteration for the record, never part of
the answer and never re-planning the end (``jobflow.recording.record_late``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "late_iterations"
down_revision: str | None = "webhooks"


def upgrade() -> None:
    op.add_column("iterations", sa.Column("late", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    op.drop_column("iterations", "late")

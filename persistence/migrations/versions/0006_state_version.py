"""jobs.state_version: bumped, under the job's row lock, each time jobs.session_state is written

Revision ID: state_version
Revises: farm_verdicts
Create Date: 2026-11-25 17:00:00

A worker keeps a job's session live between verdicts, keyed by the job and this version
(``worker/live_session.py``): when the version it kept is the row's, the state it would rebuild is
the one it holds, so it applies only the new verdict; otherwise (another worker wrote the state
since) it rebuilds the session from ``session_state``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "state_version"
down_revision: str | None = "farm_verdicts"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("state_version", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("state_version")

"""job labels, admin tokens with names, a team's audit record

Revision ID: labels_tokens_audit
Revises: session_verdicts
Create Date: 2026-11-27 21:10:00

``job_labels``: one row per label a job was submitted with (the CI context ``onnx-reducer submit``
picks up: repository, commit, branch, run URL, traceparent; and ``--label k=v``), indexed by key and
value so ``GET /v1/jobs?label=repo=...`` is a lookup. ``api_tokens.admin``: an admin token of a
team creates, lists and revokes the team's tokens and reads its audit record; ``api_tokens.name``
says what a token is for. ``audit_events``: who did what to a team's tokens and jobs (created,
revoked, deleted).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "labels_tokens_audit"
down_revision: str | None = "session_verdicts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_labels",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("key", sa.String(length=63), nullable=False),
        sa.Column("value", sa.String(length=1024), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "key", name="uq_job_labels_job_key"),
    )
    op.create_index("ix_job_labels_key_value", "job_labels", ["key", "value"])
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("name", sa.String(length=100), nullable=False, server_default=""))
        batch.add_column(sa.Column("admin", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("team_id", sa.String(length=32), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("actor", sa.String(length=120), nullable=False),
        sa.Column("target", sa.String(length=200), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_events_team_id_id", "audit_events", ["team_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_events_team_id_id", table_name="audit_events")
    op.drop_table("audit_events")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("admin")
        batch.drop_column("name")
    op.drop_index("ix_job_labels_key_value", table_name="job_labels")
    op.drop_table("job_labels")

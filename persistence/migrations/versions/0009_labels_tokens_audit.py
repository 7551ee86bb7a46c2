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

import sqlalchemy as sa
from alembic import op

from persistence.migration_columns import cascade_from, create_numbered_table, created_at, row_id, text

revision: str = "labels_tokens_audit"
down_revision: str | None = "session_verdicts"


def upgrade() -> None:
    create_numbered_table(
        "job_labels",
        row_id("job_id"),
        text("key", 63),
        text("value", 1024),
        cascade_from("job_id", "jobs"),
        sa.UniqueConstraint("job_id", "key", name="uq_job_labels_job_key"),
    )
    op.create_index("ix_job_labels_key_value", "job_labels", ["key", "value"])
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("name", sa.String(length=100), nullable=False, server_default=""))
        batch.add_column(sa.Column("admin", sa.Boolean(), nullable=False, server_default=sa.false()))
    create_numbered_table(
        "audit_events",
        row_id("team_id"),
        text("action", 32),
        text("actor", 120),
        text("target", 200),
        sa.Column("detail", sa.JSON(), nullable=False),
        created_at(),
        cascade_from("team_id", "teams"),
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

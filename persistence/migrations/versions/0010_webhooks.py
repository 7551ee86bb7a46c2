"""webhooks: a team's endpoints and the outbox of their deliveries

Revision ID: webhooks
Revises: labels_tokens_audit
Create Date: 2026-11-27 21:15:00

``webhook_endpoints``: a URL a team registered, the events it wants and its signing secret
(Standard Webhooks, ``whsec_`` + base64). ``webhook_deliveries``: the outbox, one row per event and
endpoint, written in the transaction that records the event (``persistence.webhooks``) and
delivered by the workers (``worker.webhooks``): its id is the ``webhook-id`` of every attempt, its
body the bytes signed and sent each time; ``next_attempt_at`` is when it is due (also the lease of
a worker delivering it), and the row keeps the delivery log (status, attempts, last error).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from persistence.migration_columns import cascade_from, created_at, moment, row_id, text

revision: str = "webhooks"
down_revision: str | None = "labels_tokens_audit"


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        row_id(),
        row_id("team_id"),
        text("url", 2000),
        sa.Column("events", sa.JSON(), nullable=False),
        text("secret", 120),
        text("description", 200),
        created_at(),
        cascade_from("team_id", "teams"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhook_endpoints_team_id", "webhook_endpoints", ["team_id"])
    op.create_table(
        "webhook_deliveries",
        text("id", 40),
        row_id("endpoint_id"),
        row_id("job_id", nullable=True),
        text("event_type", 40),
        sa.Column("body", sa.Text(), nullable=False),
        text("status", 16),
        sa.Column("attempts", sa.Integer(), nullable=False),
        moment("next_attempt_at", nullable=False),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        created_at(),
        moment("last_attempt_at", nullable=True),
        moment("delivered_at", nullable=True),
        cascade_from("endpoint_id", "webhook_endpoints"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"])
    op.create_index("ix_webhook_deliveries_endpoint_created", "webhook_deliveries", ["endpoint_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_endpoint_created", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_webhook_endpoints_team_id", table_name="webhook_endpoints")
    op.drop_table("webhook_endpoints")

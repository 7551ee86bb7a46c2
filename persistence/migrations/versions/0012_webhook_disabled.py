"""webhook disabled: an endpoint whose receiver answered 410 Gone sends nothing more

Revision ID: webhook_disabled
Revises: late_iterations
Create Date: 2026-11-27 22:48:00

``webhook_endpoints.disabled_at`` and ``disabled_reason``: a receiver that answers ``410 Gone``
disables its endpoint (the Standard Webhooks convention); its pending deliveries end ``dropped``
and nothing more is queued for it until the team registers the URL again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from persistence.migration_columns import moment

revision: str = "webhook_disabled"
down_revision: str | None = "late_iterations"


def upgrade() -> None:
    op.add_column("webhook_endpoints", moment("disabled_at", nullable=True))
    op.add_column("webhook_endpoints", sa.Column("disabled_reason", sa.String(300), nullable=True))


def downgrade() -> None:
    op.drop_column("webhook_endpoints", "disabled_reason")
    op.drop_column("webhook_endpoints", "disabled_at")

"""job requirements: the check spec's ``requires`` stored parsed with the job

Revision ID: job_requirements
Revises: webhook_disabled
Create Date: 2026-11-28 00:30:00

``jobs.requires``: the ``requires`` of the job's check spec (``checks.requirements.Requirements``
as JSON; ``{}``: any worker), written at intake (and by a bisect-releases hand-over, which changes
the spec's onnxruntime requirement), so fair share matches work against a worker's capabilities
without parsing each job's spec on every take. Existing rows are back-filled from their spec (an
invalid or interactive spec: ``{}``, as ``checks.spec.requirements_of`` read it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from checks.spec import requirements_of

revision: str = "job_requirements"
down_revision: str | None = "webhook_disabled"

_JOBS = sa.table(
    "jobs", sa.column("id", sa.String()), sa.column("check_spec", sa.Text()), sa.column("requires", sa.JSON())
)


def upgrade() -> None:
    op.add_column("jobs", sa.Column("requires", sa.JSON(), nullable=False, server_default=sa.text("'{}'")))
    bind = op.get_bind()
    for job_id, spec in bind.execute(sa.select(_JOBS.c.id, _JOBS.c.check_spec)).all():
        requires = requirements_of(spec).to_json()
        if requires:
            bind.execute(sa.update(_JOBS).where(_JOBS.c.id == job_id).values(requires=requires))


def downgrade() -> None:
    op.drop_column("jobs", "requires")

"""job spec: the check spec normalised at intake and stored parsed with the job

Revision ID: job_spec
Revises: job_requirements
Create Date: 2026-11-28 04:15:00

``jobs.spec``: the job's check spec as ``checks.spec.CheckSpec.to_json`` normalised it at intake
(defaults filled in), which the worker, the graph view and the bisect jobs read back
(``persistence.stored_spec``) instead of parsing ``jobs.check_spec``, the text as the user sent
it (kept: it is what they see and download). NULL for ``kind: interactive`` (a person answers;
there is no spec to run) and for a row whose text no longer parses with this version: a job
started from such a row fails with a message saying to submit it again, and its graph view shows
no tolerance. Existing rows are back-filled by parsing their text once here; a bisect-releases job
waiting for a release had its text rewritten to require that release, so its user's spec (kept in
its session state, ``spec``) is the one stored.

The back-fill uses ``checks.spec`` as it is when the migration runs (as 0013 does), not a frozen
copy: an old database upgraded by a later version gets that version's normalisation, which is the
one its readers expect.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from checks.spec import CheckSpecError, parse_check_spec

revision: str = "job_spec"
down_revision: str | None = "job_requirements"

_JOBS = sa.table(
    "jobs",
    sa.column("id", sa.String()),
    sa.column("check_spec", sa.Text()),
    sa.column("options", sa.JSON()),
    sa.column("session_state", sa.JSON()),
    sa.column("spec", sa.JSON()),
)
_RELEASES_TASK = "bisect-releases"


def upgrade() -> None:
    op.add_column("jobs", sa.Column("spec", sa.JSON(), nullable=True))
    bind = op.get_bind()
    for job_id, text, options in bind.execute(sa.select(_JOBS.c.id, _JOBS.c.check_spec, _JOBS.c.options)).all():
        releases = (options or {}).get("task") == _RELEASES_TASK
        document = _normalised(_user_text(bind, job_id, text) if releases else text)
        if document is not None:
            bind.execute(sa.update(_JOBS).where(_JOBS.c.id == job_id).values(spec=document))


def _user_text(bind: sa.Connection, job_id: str, text: str) -> str:
    """A bisect-releases job's spec as the user sent it (its session state keeps it while the
    job's own text requires the release it waits for)."""
    state = bind.execute(sa.select(_JOBS.c.session_state).where(_JOBS.c.id == job_id)).scalar()
    kept = state.get("spec") if isinstance(state, dict) else None
    return kept if isinstance(kept, str) else text


def _normalised(text: str) -> dict[str, Any] | None:
    try:
        return parse_check_spec(text).to_json()
    except CheckSpecError:
        return None  # interactive, or no longer valid: readers say so (persistence.stored_spec)


def downgrade() -> None:
    op.drop_column("jobs", "spec")

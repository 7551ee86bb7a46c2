"""The columns and constraints the Alembic migrations (``persistence/migrations/versions/``) write
again and again, built in one place.

Each builder returns exactly the object a migration spelled out before, so the schema a migration
creates is the same to the letter (its SQLite and PostgreSQL dumps after ``upgrade head`` did not
change when the migrations moved onto these builders). A migration is history: a builder here is
never changed in a way that would change a column an applied migration created; a new shape gets a
new builder."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.schema import SchemaItem

ROW_ID_LENGTH = 32  # the uuid4 hex of a team, job, token, artifact or webhook endpoint


def serial_id() -> sa.Column[Any]:
    """An ``id`` the database numbers (the table names it in ``sa.PrimaryKeyConstraint("id")``)."""
    return sa.Column("id", sa.Integer(), autoincrement=True, nullable=False)


def row_id(name: str = "id", *, nullable: bool = False) -> sa.Column[Any]:
    """A row's own hex id or a reference to another row's (``String(32)``)."""
    return sa.Column(name, sa.String(length=ROW_ID_LENGTH), nullable=nullable)


def text(name: str, length: int, *, nullable: bool = False) -> sa.Column[Any]:
    return sa.Column(name, sa.String(length=length), nullable=nullable)


def moment(name: str, *, nullable: bool) -> sa.Column[Any]:
    """A point in time with its time zone."""
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def created_at() -> sa.Column[Any]:
    return moment("created_at", nullable=False)


def cascade_from(column: str, table: str) -> sa.ForeignKeyConstraint:
    """``column`` points at ``table.id``; the row goes when that row goes."""
    return sa.ForeignKeyConstraint([column], [f"{table}.id"], ondelete="CASCADE")


def create_numbered_table(name: str, *columns_and_constraints: SchemaItem) -> None:
    """``op.create_table`` for a table whose rows the database numbers: ``id`` first, the primary key."""
    op.create_table(name, serial_id(), *columns_and_constraints, sa.PrimaryKeyConstraint("id"))

"""Alembic: upgrade an empty PostgreSQL database to head, down to base, and up again; the
migration matches the models (autogenerate finds nothing to add); ``onnx-reducer db upgrade``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from persistence.db import normalize_url
from persistence.migrate import downgrade, upgrade
from persistence.models import Base
from tests.service.commands import MIGRATE_COMMAND

TABLES = {"alembic_version", "teams", "api_tokens", "jobs", "iterations", "events", "artifacts", "workers"}


def _tables(url: str) -> set[str]:
    engine = create_engine(normalize_url(url))
    names = set(inspect(engine).get_table_names())
    engine.dispose()
    return names


def test_upgrade_from_empty_downgrade_and_upgrade_again(pg_url: str) -> None:
    assert _tables(pg_url) == set()
    upgrade(pg_url)
    assert _tables(pg_url) == TABLES
    downgrade(pg_url, "base")
    assert _tables(pg_url) == {"alembic_version"}
    upgrade(pg_url)
    assert _tables(pg_url) == TABLES


def test_migrations_match_the_models(pg_url: str) -> None:
    upgrade(pg_url)
    engine = create_engine(normalize_url(pg_url))
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == []


def test_db_upgrade_command_on_sqlite(tmp_path: Path) -> None:
    env = dict(os.environ, DATABASE_URL=f"sqlite:///{tmp_path}/sub/db.sqlite")
    subprocess.run(MIGRATE_COMMAND, env=env, check=True, capture_output=True, timeout=120)
    assert _tables(env["DATABASE_URL"]) == TABLES

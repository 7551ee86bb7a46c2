"""Run the Alembic migrations in ``persistence/migrations/`` programmatically (``onnx-reducer db upgrade``).

They live inside the package so that an installed wheel (the images install one) carries them."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from persistence.db import normalize_url

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)

"""jobflow's units on a real database with no service around them: a SQLite file in the test's
folder, migrated as the service migrates its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from persistence.db import Database
from persistence.migrate import upgrade


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    url = f"sqlite:///{tmp_path / 'jobflow.db'}"
    upgrade(url)
    database = Database(url)
    yield database
    database.dispose()

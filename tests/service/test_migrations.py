"""Alembic: upgrade an empty PostgreSQL database to head, down to base, and up again; the
migration matches the models (autogenerate finds nothing to add); ``onnx-reducer db upgrade``;
migrations that change the jobs table keep its rows (PostgreSQL, and SQLite where it matters)."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from persistence.db import normalize_url
from persistence.migrate import downgrade, upgrade
from persistence.models import Base
from tests.service.commands import MIGRATE_COMMAND

TABLES = {
    *("alembic_version", "teams", "api_tokens", "jobs", "iterations", "events", "artifacts", "workers"),
    "check_units",
    "farm_verdicts",
    "session_verdicts",
    "job_labels",
    "audit_events",
    "webhook_endpoints",
    "webhook_deliveries",
}


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


def _insert_legacy_job(url: str, cache: dict[str, object]) -> None:
    engine = create_engine(normalize_url(url))
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO teams (id, name, created_at) VALUES ('t', 'team', now())"))
        conn.execute(
            text(
                "INSERT INTO jobs (id, team_id, status, queue, mode, options, check_spec, check_kind, model_filename,"
                " model_sha256, model_size, model_path, iterations_done, checks_run, check_time_s, attempts,"
                " cancel_requested, strategy_state, verdict_cache, event_seq, created_at, updated_at) VALUES"
                " ('j', 't', 'failed', 'cpu', 'auto', '{}', 'kind: op-present', 'op-present', 'm.onnx', 'x', 1,"
                " 'p', 2, 2, 0.0, 1, false, '{\"version\": 1}', :cache, 2, now(), now())"
            ),
            {"cache": json.dumps(cache)},
        )
    engine.dispose()


def _job_columns(url: str) -> dict[str, object]:
    engine = create_engine(normalize_url(url))
    with engine.connect() as conn:
        row = conn.execute(text("SELECT * FROM jobs WHERE id = 'j'")).mappings().one()
    engine.dispose()
    return dict(row)


def test_a_job_stored_before_sessions_keeps_its_verdicts_across_the_migration(pg_url: str) -> None:
    """session_state: the verdict cache of an older job becomes its session state (a session
    resumes from it without re-running those checks), and back on downgrade."""
    cache = {"version": 1, "tool": "onnx-reducer", "graph": "g", "check": "c", "verdicts": {"fp": {"kind": "fail"}}}
    upgrade(pg_url, "0001")
    _insert_legacy_job(pg_url, cache)
    upgrade(pg_url)
    row = _job_columns(pg_url)
    assert row["session_state"] == {"cache": cache}
    assert "verdict_cache" not in row and "strategy_state" not in row
    downgrade(pg_url, "farm_workers_and_dispatch")
    assert _job_columns(pg_url)["verdict_cache"] == cache


@pytest.fixture(params=["sqlite", "postgresql"])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each kind the service runs on."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/db.sqlite"
    return str(request.getfixturevalue("pg_url"))


def _insert_dispatched_job(url: str) -> None:
    """A job row as revision state_version (0006) stores it, dispatched_at set."""
    now = datetime.now(UTC)
    engine = create_engine(normalize_url(url))
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO teams (id, name, created_at) VALUES ('t', 'team', :now)"), {"now": now})
        conn.execute(
            text(
                "INSERT INTO jobs (id, team_id, status, queue, mode, options, check_spec, check_kind, model_filename,"
                " model_sha256, model_size, model_path, iterations_done, checks_run, check_time_s, attempts,"
                " cancel_requested, event_seq, created_at, updated_at, dispatched_at) VALUES"
                " ('j', 't', 'queued', 'cpu', 'auto', '{}', 'kind: op-present', 'op-present', 'm.onnx', 'x', 1,"
                " 'p', 0, 0, 0.0, 0, :no, 0, :now, :now, :now)"
            ),
            {"no": False, "now": now},
        )
    engine.dispose()


def test_dropping_dispatched_at_keeps_the_jobs_and_a_downgrade_adds_it_back_empty(any_url: str) -> None:
    upgrade(any_url, "state_version")
    _insert_dispatched_job(any_url)
    upgrade(any_url)
    row = _job_columns(any_url)
    assert "dispatched_at" not in row
    assert (row["status"], row["model_filename"]) == ("queued", "m.onnx")
    downgrade(any_url, "state_version")
    row = _job_columns(any_url)
    assert row["dispatched_at"] is None
    assert (row["status"], row["model_filename"]) == ("queued", "m.onnx")
    upgrade(any_url)
    assert "dispatched_at" not in _job_columns(any_url)


def _insert_jobs_with_specs(url: str, specs: dict[str, str]) -> None:
    """Job rows as revision webhook_disabled (0012) stores them: no ``requires``."""
    now = datetime.now(UTC)
    engine = create_engine(normalize_url(url))
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO teams (id, name, created_at) VALUES ('t', 'team', :now)"), {"now": now})
        for job_id, spec in specs.items():
            conn.execute(
                text(
                    "INSERT INTO jobs (id, team_id, status, queue, mode, options, check_spec, check_kind,"
                    " model_filename, model_sha256, model_size, model_path, iterations_done, checks_run,"
                    " check_time_s, attempts, cancel_requested, event_seq, created_at, updated_at) VALUES"
                    " (:id, 't', 'queued', 'gpu', 'auto', '{}', :spec, 'op-present', 'm.onnx', 'x', 1, 'p', 0, 0,"
                    " 0.0, 0, :no, 0, :now, :now)"
                ),
                {"id": job_id, "spec": spec, "no": False, "now": now},
            )
    engine.dispose()


def test_the_requirements_migration_back_fills_each_job_s_requires_from_its_spec(any_url: str) -> None:
    upgrade(any_url, "webhook_disabled")
    op_present = "kind: op-present\nops: [Mul]\n"
    specs = {
        "gpu": op_present + "requires: {gpu: H100, onnxruntime: '1.20'}\n",
        "plain": op_present,
        "interactive": "kind: interactive",
    }
    _insert_jobs_with_specs(any_url, specs)
    upgrade(any_url)
    engine = create_engine(normalize_url(any_url))
    with engine.connect() as conn:
        rows: dict[str, object] = {str(row[0]): row[1] for row in conn.execute(text("SELECT id, requires FROM jobs"))}
    engine.dispose()
    stored = {job_id: value if isinstance(value, dict) else json.loads(str(value)) for job_id, value in rows.items()}
    assert stored == {"gpu": {"gpu": ["H100"], "onnxruntime": "==1.20.*"}, "plain": {}, "interactive": {}}


def _insert_job(url: str, job_id: str, spec: str, options: dict[str, object], state: dict[str, object] | None) -> None:
    """A job row as revision job_requirements (0013) stores it: no parsed ``spec``."""
    now = datetime.now(UTC)
    engine = create_engine(normalize_url(url))
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (id, team_id, status, queue, mode, options, check_spec, check_kind, model_filename,"
                " model_sha256, model_size, model_path, iterations_done, checks_run, check_time_s, attempts,"
                " cancel_requested, event_seq, created_at, updated_at, session_state) VALUES"
                " (:id, 't', 'queued', 'cpu', 'auto', :options, :spec, 'op-present', 'm.onnx', 'x', 1, 'p', 0, 0,"
                " 0.0, 0, :no, 0, :now, :now, :state)"
            ),
            {
                "id": job_id,
                "spec": spec,
                "options": json.dumps(options),
                "state": None if state is None else json.dumps(state),
                "no": False,
                "now": now,
            },
        )
    engine.dispose()


def test_the_spec_migration_stores_each_job_s_spec_parsed_and_keeps_the_text(any_url: str) -> None:
    upgrade(any_url, "job_requirements")
    engine = create_engine(normalize_url(any_url))
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO teams (id, name, created_at) VALUES ('t', 'team', :now)"), {"now": datetime.now(UTC)}
        )
    engine.dispose()
    user = "kind: op-present\nops: [Mul]\n"
    routed = '{"kind": "op-present", "ops": ["Mul"], "requires": {"onnxruntime": "==1.18.0"}}'  # a hand-over's
    _insert_job(any_url, "plain", user + "timeout: 30\n", {}, None)
    _insert_job(any_url, "interactive", "kind: interactive", {}, None)
    _insert_job(any_url, "outdated", "kind: op-present\nops: [Mul]\nretired_field: 1\n", {}, None)
    _insert_job(any_url, "waiting", routed, {"task": "bisect-releases"}, {"spec": user, "runs": []})
    upgrade(any_url)
    engine = create_engine(normalize_url(any_url))
    with engine.connect() as conn:
        rows = {str(r[0]): (r[1], r[2]) for r in conn.execute(text("SELECT id, spec, check_spec FROM jobs"))}
    engine.dispose()
    stored = {k: json.loads(v) if isinstance(v, str) else v for k, (v, _) in rows.items()}
    op_present = {"kind": "op-present", "timeout": 600.0, "repeat": 1, "fail_if": "any", "ops": ["Mul"], "names": []}
    assert stored == {
        "plain": {**op_present, "timeout": 30.0},
        "interactive": None,
        "outdated": None,  # no longer parses: a worker fails the job saying to submit it again
        "waiting": op_present,  # the user's spec, not the one routing it to a worker with 1.18.0
    }
    assert rows["plain"][1] == user + "timeout: 30\n" and rows["waiting"][1] == routed  # the texts unchanged
    downgrade(any_url, "job_requirements")
    assert "spec" not in _job_columns_of(any_url, "plain")


def _job_columns_of(url: str, job_id: str) -> dict[str, object]:
    engine = create_engine(normalize_url(url))
    with engine.connect() as conn:
        row = conn.execute(text("SELECT * FROM jobs WHERE id = :id"), {"id": job_id}).mappings().one()
    engine.dispose()
    return dict(row)

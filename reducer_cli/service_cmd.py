"""``onnx-reducer serve | worker | db | token``: the service's deployables, composed here (the
command line is the one place that may import both the api and the worker). Their arguments are in
``service_args``; this module loads the service stack and is imported only to run one of them."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from api.app import create_app
from api.settings import load_api_settings
from persistence.db import Database, database_problem, describe_url
from persistence.jsonlog import configure_logging
from persistence.migrate import downgrade, upgrade
from persistence.repositories import TeamRepository
from persistence.repositories.audit import CLI_ACTOR, TOKEN_CREATED, TOKEN_REVOKED, AuditRepository
from persistence.repositories.teams import MAX_TOKEN_NAME, TokenInfo
from reducer_core.errors import ReducerError, UsageError
from worker.celery_app import default_app
from worker.context import context_from_settings
from worker.local import LocalRunner
from worker.settings import load_worker_settings

EMBEDDED_TEAM = "default"


def _database_url() -> str:
    return load_worker_settings().database_url


@contextlib.contextmanager
def _database_errors(url: str) -> Iterator[None]:
    """A database that is unreachable or not migrated is one line for the user, not a traceback."""
    try:
        yield
    except SQLAlchemyError as exc:
        problem = database_problem(exc, url)
        if problem is None:
            raise
        raise ReducerError(problem) from None


def db_command(ns: argparse.Namespace) -> int:
    url = _database_url()
    with _database_errors(url):
        if ns.db_command == "upgrade":
            _ensure_sqlite_folder(url)
            upgrade(url, ns.revision)
        else:
            downgrade(url, ns.revision)
    print(f"database at revision {getattr(ns, 'revision', 'head')}")
    return 0


def token_command(ns: argparse.Namespace) -> int:
    url = _database_url()
    with _database_errors(url):
        if url.startswith("sqlite"):  # the embedded default: a fresh home is migrated, as `serve` does
            _migrate_sqlite(url)
        database = Database(url)
        with database.session() as session:
            teams = TeamRepository(session)
            if ns.token_command == "create":
                print(_create_token(session, teams, ns))
            elif ns.token_command == "list":
                _print_tokens(teams.tokens(), describe_url(url))
            else:
                _revoke(session, teams, ns.token)
        database.dispose()
    return 0


def _print_tokens(tokens: list[TokenInfo], where: str) -> None:
    if not tokens:
        print(f"No tokens in {where}; create one with `onnx-reducer token create --team NAME`.")
        return
    print(f"{'PREFIX':<14}{'TEAM':<24}{'ROLE':<8}{'CREATED':<27}REVOKED")
    for token in tokens:
        revoked = token.revoked_at.isoformat(timespec="seconds") if token.revoked_at else "-"
        role = "admin" if token.admin else "member"
        created = token.created_at.isoformat(timespec="seconds")
        print(f"{token.prefix:<14}{token.team[:23]:<24}{role:<8}{created:<27}{revoked}")


def _create_token(session: Session, teams: TeamRepository, ns: argparse.Namespace) -> str:
    """A new token (recorded in the team's audit record as made by the command line)."""
    if len(ns.name) > MAX_TOKEN_NAME:
        raise UsageError(f"--name is {len(ns.name)} characters long; the most is {MAX_TOKEN_NAME}.")
    row, token = teams.add_token(teams.get_or_create(ns.team).id, name=ns.name, admin=ns.admin)
    detail = {"prefix": row.prefix, "name": row.name, "admin": row.admin}
    AuditRepository(session).add(row.team_id, TOKEN_CREATED, CLI_ACTOR, row.prefix, detail)
    return token


def _revoke(session: Session, teams: TeamRepository, token_or_prefix: str) -> None:
    matches = teams.matching(token_or_prefix)
    if not matches:
        raise UsageError(f"No active token matches '{token_or_prefix[:16]}' (see `onnx-reducer token list`).")
    if len(matches) > 1:
        raise UsageError(f"'{token_or_prefix}' matches {len(matches)} tokens; give the whole token.")
    teams.revoke(matches[0].id)
    AuditRepository(session).add(matches[0].team_id, TOKEN_REVOKED, CLI_ACTOR, matches[0].prefix)
    print(f"revoked {matches[0].prefix}")


def worker_command(ns: argparse.Namespace) -> int:
    argv = ["worker", "-Q", ns.queues, "--pool", ns.pool, "--concurrency", str(ns.concurrency), "--loglevel", "INFO"]
    default_app().worker_main(argv)
    return 0


def _ensure_sqlite_folder(url: str) -> None:
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)


def _migrate_sqlite(url: str) -> None:
    _ensure_sqlite_folder(url)
    upgrade(url)


def _wait_for_database(url: str, wait_s: float) -> None:
    """Start-up: a database that is not reachable yet (a container starting beside this one) is
    retried for ``wait_s`` seconds, with one line saying so."""
    database = Database(url)
    deadline = time.monotonic() + wait_s
    told = False
    try:
        while True:
            try:
                database.ping()
                return
            except (OperationalError, InterfaceError) as exc:
                problem = database_problem(exc, url) or str(exc)
                if time.monotonic() >= deadline:
                    raise ReducerError(f"{problem} Gave up after {wait_s:g} s (DATABASE_WAIT_S).") from None
                if not told:
                    print(f"{problem} Retrying for up to {wait_s:g} s...", file=sys.stderr, flush=True)
                    told = True
                time.sleep(min(2.0, max(deadline - time.monotonic(), 0.1)))
    finally:
        database.dispose()


def _first_start(url: str, wait_s: float) -> None:
    """Wait for the database; the embedded default migrates its SQLite file and creates a team the
    first time."""
    if url.startswith("sqlite"):
        _migrate_sqlite(url)
    else:
        _wait_for_database(url, wait_s)
    with _database_errors(url):
        database = Database(url)
        with database.session() as session:
            teams = TeamRepository(session)
            if teams.count() == 0:
                teams.get_or_create(EMBEDDED_TEAM)
                print(f"Created team '{EMBEDDED_TEAM}' (first start).")
        database.dispose()


def _program() -> str:
    """How to call this ``onnx-reducer`` from another shell: the script's full path when it runs from a
    virtual environment (whose bin folder another shell may not have on PATH, as under `make run`)."""
    script = Path(sys.argv[0])
    if script.name == "onnx-reducer" and sys.prefix != sys.base_prefix and script.is_file():
        return shlex.quote(str(script.absolute()))
    return "onnx-reducer"


def token_hint(database_url: str, home: Path) -> str:
    """The ``token create`` command that reaches the database this server uses: the same
    ONNX_REDUCER_HOME (or SQLite DATABASE_URL) as the server, else the token lands in another database
    and the server answers 401."""
    command = f"{_program()} token create --team {EMBEDDED_TEAM}"
    if os.environ.get("DATABASE_URL"):
        if database_url.startswith("sqlite"):
            return f"DATABASE_URL={shlex.quote(database_url)} {command}"
        return f"{command}  (with this server's DATABASE_URL in the environment)"
    if os.environ.get("ONNX_REDUCER_HOME") or os.environ.get("XDG_DATA_HOME"):  # not the plain default
        return f"ONNX_REDUCER_HOME={shlex.quote(str(home))} {command}"
    return command


def port_taken(host: str, port: int) -> bool:
    """Whether something already listens on ``host:port`` (bound the way uvicorn binds it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def port_hint(host: str, port: int) -> str:
    """The one line ``serve`` prints for a port in use: the next free port, as ``make run`` (when
    make started it) or this command takes it."""
    free = next((p for p in range(port + 1, min(port + 50, 65536)) if not port_taken(host, p)), None)
    if free is None:
        return f"port {port} is in use: stop what listens there or choose another port with --port"
    if os.environ.get("MAKELEVEL"):
        return f"port {port} is in use: try make run PORT={free}"
    return f"port {port} is in use: try make run PORT={free} (or onnx-reducer serve --port {free})"


def serve_command(ns: argparse.Namespace) -> int:
    if port_taken(ns.host, ns.port):
        print(port_hint(ns.host, ns.port), file=sys.stderr)
        return 2
    settings = load_api_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    _first_start(settings.database_url, settings.database_wait_s)
    configure_logging()
    if ns.local_worker:
        worker_settings = load_worker_settings()
        runner = LocalRunner(context_from_settings(worker_settings), worker_settings, jobs_in_child=True).start()
        app = create_app(settings, enqueue=runner)
    else:
        if not settings.redis_url:
            print("--no-local-worker needs REDIS_URL (the Celery broker).", file=sys.stderr)
            return 2
        app = create_app(settings)
    app.state.services.intake.warm()
    # What is loaded now (onnx, onnxruntime, the app) lives as long as the server: out of the
    # collector's sight, a full collection takes a few ms instead of stopping every request for
    # ~230 ms (seen under load with bench/load_api.py).
    gc.freeze()
    url = f"http://{ns.host}:{ns.port}"
    print(f"onnx-reducer service on {url} (web UI: {url}/, API docs: {url}/docs)")
    hint = token_hint(settings.database_url, settings.onnx_reducer_home)
    print(f"Get a token: {hint}  (send it as 'Authorization: Bearer TOKEN')")
    sys.stdout.flush()
    uvicorn.run(app, host=ns.host, port=ns.port, log_level="info", log_config=None)  # our JSON logging
    return 0


HANDLERS = {"serve": serve_command, "worker": worker_command, "db": db_command, "token": token_command}

"""``onnx-reducer serve | worker | db | token``: the service's deployables, composed here (the
command line is the one place that may import both the api and the worker)."""

from __future__ import annotations

import argparse
import sys

from persistence.contracts import QUEUES

EMBEDDED_TEAM = "default"


def add_service_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve",
        help="Run the web service (embedded default: SQLite, ./data and an in-process runner).",
        description="Start the HTTP api. Without REDIS_URL (or without --no-local-worker) jobs run in this "
        "process; with --no-local-worker they are queued to Celery workers (`onnx-reducer worker`).",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--no-local-worker", dest="local_worker", action="store_false", help="Queue jobs to Celery (needs REDIS_URL)."
    )
    worker = sub.add_parser("worker", help="Run a Celery worker (needs REDIS_URL and DATABASE_URL).")
    worker.add_argument("-Q", "--queues", default="cpu", help=f"Comma-separated queues ({', '.join(QUEUES)}).")
    worker.add_argument("--pool", default="solo", choices=("solo", "prefork"))
    worker.add_argument("--concurrency", type=int, default=1)
    db = sub.add_parser("db", help="Database migrations (DATABASE_URL).")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    upgrade = db_sub.add_parser("upgrade", help="Migrate to the newest schema (or --revision).")
    upgrade.add_argument("--revision", default="head")
    downgrade = db_sub.add_parser("downgrade", help="Migrate down to REVISION (e.g. base).")
    downgrade.add_argument("revision")
    token = sub.add_parser("token", help="API tokens.")
    token_sub = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    create = token_sub.add_parser("create", help="Print a new token for a team (created if needed).")
    create.add_argument("--team", required=True)


def _database_url() -> str:
    from worker.settings import load_worker_settings

    return load_worker_settings().database_url


def db_command(ns: argparse.Namespace) -> int:
    from persistence.migrate import downgrade, upgrade

    url = _database_url()
    if ns.db_command == "upgrade":
        _ensure_sqlite_folder(url)
        upgrade(url, ns.revision)
    else:
        downgrade(url, ns.revision)
    print(f"database at revision {getattr(ns, 'revision', 'head')}")
    return 0


def token_command(ns: argparse.Namespace) -> int:
    from persistence.db import Database
    from persistence.repositories import TeamRepository

    with Database(_database_url()).session() as session:
        teams = TeamRepository(session)
        token = teams.create_token(teams.get_or_create(ns.team))
    print(token)
    return 0


def worker_command(ns: argparse.Namespace) -> int:
    from worker.celery_app import default_app

    argv = ["worker", "-Q", ns.queues, "--pool", ns.pool, "--concurrency", str(ns.concurrency), "--loglevel", "INFO"]
    default_app().worker_main(argv)
    return 0


def _ensure_sqlite_folder(url: str) -> None:
    from pathlib import Path

    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)


def _first_start(url: str) -> None:
    """Embedded default: migrate the SQLite file and create a team the first time."""
    from persistence.db import Database
    from persistence.migrate import upgrade
    from persistence.repositories import TeamRepository

    if url.startswith("sqlite"):
        _ensure_sqlite_folder(url)
        upgrade(url)
    with Database(url).session() as session:
        teams = TeamRepository(session)
        if teams.count() == 0:
            teams.get_or_create(EMBEDDED_TEAM)
            print(f"Created team '{EMBEDDED_TEAM}' (first start).")


def serve_command(ns: argparse.Namespace) -> int:
    import uvicorn

    from api.app import create_app
    from api.settings import load_api_settings
    from persistence.jsonlog import configure_logging

    settings = load_api_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    _first_start(settings.database_url)
    configure_logging()
    if ns.local_worker:
        from worker.context import context_from_settings
        from worker.local import LocalRunner
        from worker.settings import load_worker_settings

        worker_settings = load_worker_settings()
        runner = LocalRunner(context_from_settings(worker_settings), worker_settings).start()
        app = create_app(settings, enqueue=runner)
    else:
        if not settings.redis_url:
            print("--no-local-worker needs REDIS_URL (the Celery broker).", file=sys.stderr)
            return 2
        app = create_app(settings)
    url = f"http://{ns.host}:{ns.port}"
    print(f"onnx-reducer service on {url} (web UI: {url}/, API docs: {url}/docs)")
    print(f"Get a token: onnx-reducer token create --team {EMBEDDED_TEAM}  (send it as 'Authorization: Bearer TOKEN')")
    sys.stdout.flush()
    uvicorn.run(app, host=ns.host, port=ns.port, log_level="info", log_config=None)  # our JSON logging
    return 0


HANDLERS = {"serve": serve_command, "worker": worker_command, "db": db_command, "token": token_command}

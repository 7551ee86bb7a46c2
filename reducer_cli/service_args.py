"""The arguments of ``onnx-reducer serve | worker | db | token`` (their handlers, which load the
service stack, are in ``service_cmd``)."""

from __future__ import annotations

import argparse

from persistence.contracts import QUEUES

SERVICE_COMMANDS = ("serve", "worker", "db", "token")


def add_service_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve",
        help="Run the web service (embedded default: SQLite and artifacts in ONNX_REDUCER_HOME, an "
        "in-process runner; `make run` sets ONNX_REDUCER_HOME=./data).",
        description="Start the HTTP api. Without REDIS_URL (or without --no-local-worker) jobs run in this "
        "process; with --no-local-worker they are queued to Celery workers (`onnx-reducer worker`). The "
        "embedded default keeps its SQLite file and artifacts in ONNX_REDUCER_HOME (default: "
        "$XDG_DATA_HOME/onnx-reducer, else ~/.local/share/onnx-reducer); it prints the `token create` "
        "command that works for it.",
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
    create.add_argument(
        "--admin",
        action="store_true",
        help="A team admin token: it also creates, lists and revokes the team's tokens and reads its audit record "
        "(on the web page's Team view, or /v1/tokens and /v1/audit).",
    )
    create.add_argument("--name", default="", help="What the token is for (shown in the team's token list).")
    token_sub.add_parser(
        "list", help="List tokens: prefix, team, role (admin or member), created, revoked (never the tokens)."
    )
    revoke = token_sub.add_parser("revoke", help="Revoke a token (its open event streams end too).")
    revoke.add_argument("token", metavar="TOKEN_OR_PREFIX", help="the token, or its prefix as `token list` shows it")

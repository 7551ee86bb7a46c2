"""What ``bisect-passes`` and ``bisect-releases`` share on the command line: the options after
the check spec (golden values, signature pinning, ``--summary-json``, ``--bundle``) and how the
answer goes into a bug-report bundle (``reduce --bundle``'s zip, whose repro.py prints it)."""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

from reducer_core.errors import UsageError
from reducer_core.verdict import Pinning


def add_bisect_parser(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    name: str,
    help_text: str,
    description: str,
    model_help: str,
) -> argparse.ArgumentParser:
    """The ``name`` subcommand with what every bisect command takes first: the model
    (``model_help``: which one) and ``--check-spec``."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=description)
    parser.add_argument("model", help=model_help)
    parser.add_argument("--check-spec", required=True, metavar="SPEC", help="The check spec (docs/check-specs.md).")
    return parser


def add_answer_arguments(parser: argparse.ArgumentParser, pinned_against: str, bundle_help: str) -> None:
    """``--golden``, ``--pin-signature`` (the same failure as ``pinned_against``'s),
    ``--summary-json`` and ``--bundle`` (``bundle_help``: what goes into it)."""
    parser.add_argument("--golden", default=None, metavar="GOLDEN", help="Golden values, for a kind: golden spec.")
    parser.add_argument(
        "--pin-signature",
        choices=[p.value for p in Pinning],
        default=Pinning.KIND.value,
        help=f"What counts as the same failure as {pinned_against} (as for reduce; default: kind).",
    )
    parser.add_argument("--summary-json", default=None, metavar="FILE", help="Write the answer as JSON.")
    parser.add_argument("--bundle", default=None, metavar="ZIP", help=bundle_help)


def bundle_to_update(value: str | None) -> Path | None:
    """``--bundle``'s zip, refused before any check runs when it is no zip."""
    if value is None:
        return None
    if not zipfile.is_zipfile(value):
        raise UsageError(f"--bundle: '{value}' is no zip; give the file reduce --bundle wrote.")
    return Path(value)

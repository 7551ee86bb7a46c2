"""Helpers for CLI tests: check scripts written as tiny shell scripts (fast: no Python start-up
per check) that look for node names in the iteration model's bytes and log every run."""

from __future__ import annotations

import stat
from collections.abc import Sequence
from pathlib import Path

import onnx

from reducer_cli.main import run
from tests.models import BRANCHY_NODES, branchy_model

ITER = "polygraphy_debug.onnx"
LOG = "checks.log"


def node(letter: str) -> str:
    """The node name used in CLI models: unique bytes in the serialized model, greppable."""
    return f"Node{letter}_"


ALL_NODES = [node(letter) for letter in BRANCHY_NODES]


def save_branchy(path: str = "model.onnx") -> str:
    onnx.save(branchy_model(prefix="Node", suffix="_"), path)
    return path


def write_script(path: str, body: str) -> list[str]:
    """A ``/bin/sh`` check script; every run appends a line to ``checks.log``. Returns the argv."""
    script = Path(path)
    script.write_text(f'#!/bin/sh\necho "$@" >> {LOG}\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return [str(script.resolve()), ITER]


def fails_when_present(*names: str, code: int = 1, message: str = "") -> str:
    """Script body: exit ``code`` (after printing ``message``) when every name is in the model."""
    conditions = " && ".join(f'grep -q "{n}" "$1"' for n in names)
    echo = f'echo "{message}"; ' if message else ""
    return f"if {conditions}; then {echo}exit {code}; fi\nexit 0"


def checks_logged() -> int:
    log = Path(LOG)
    return len(log.read_text().splitlines()) if log.exists() else 0


def node_names(path: str) -> list[str]:
    return [n.name for n in onnx.load(path).graph.node]


def reduce(model: str, *options: str, check: Sequence[str] | None = None) -> int:
    argv = ["reduce", model, *options, "--no-progress"]
    if check is not None:
        argv += ["--check", *check]
    return run(argv)

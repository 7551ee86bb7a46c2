"""Entry points for check child processes in tests (``checks.child`` imports them by name)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from typing import Any


def segfault(payload: Mapping[str, Any]) -> dict[str, Any]:
    os.kill(os.getpid(), signal.SIGSEGV)
    return {}


def hang(payload: Mapping[str, Any]) -> dict[str, Any]:
    time.sleep(120)
    return {}


def broken(payload: Mapping[str, Any]) -> dict[str, Any]:
    raise RuntimeError("the check harness is broken")


def environment(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Report the names of the child's environment variables (one per line) as the output."""
    return {"kind": "pass", "signature": "", "detail": "", "output": "\n".join(sorted(os.environ))}


def chatty(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Print ``payload['megabytes']`` MB to stdout, then a last line."""
    import sys

    line = b"x" * 1023 + b"\n"
    for _ in range(int(payload["megabytes"]) * 1024):
        sys.stdout.buffer.write(line)
    sys.stdout.buffer.write(b"the very last line\n")
    sys.stdout.flush()
    return {"kind": "pass", "signature": "", "detail": "", "output": ""}

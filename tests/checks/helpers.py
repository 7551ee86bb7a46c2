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

"""Check child entries (``checks.child`` imports them by name) for the warm runner tests: each
reports which process ran it, and under which parent."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

MiB = 2**20


def _result(kind: str, detail: str = "") -> dict[str, Any]:
    return {"kind": kind, "signature": "", "detail": detail, "output": ""}


def whoami(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Passes; the detail is ``pid parent cwd draw``: this process, its parent, its working folder
    and a draw of numpy's global random state."""
    draw = int(np.random.randint(0, 2**31 - 1))
    return _result("pass", f"{os.getpid()} {os.getppid()} {Path.cwd()} {draw}")


def hog(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Allocates ``megabytes`` (touched, so resident) and holds them: the memory limit kills it."""
    held = bytearray(int(payload["megabytes"]) * MiB)
    time.sleep(30)
    return _result("pass", str(len(held)))


def leave_garbage(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Fails, after changing what a later check in the same process would see: a module global,
    an environment variable and the working folder's contents."""
    os.environ["ONNX_REDUCER_TEST_LEFTOVER"] = "1"
    globals()["LEFTOVER"] = True
    Path("leftover.txt").write_text("left behind")
    return {"kind": "fail", "signature": "garbage", "detail": "", "output": ""}


def sees_garbage(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Fails when anything ``leave_garbage`` changed is visible here."""
    seen = [
        name
        for name, present in (
            ("environment", "ONNX_REDUCER_TEST_LEFTOVER" in os.environ),
            ("global", "LEFTOVER" in globals()),
            ("file", Path("leftover.txt").exists()),
        )
        if present
    ]
    return _result("fail" if seen else "pass", ",".join(seen))


def meet(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Writes this process's parent into ``payload['folder']``, waits (up to 60 s) until
    ``payload['count']`` checks did, and passes with its parent's pid as the detail: checks that
    meet ran at the same time."""
    folder = Path(payload["folder"])
    written = folder / f"{os.getpid()}.written"
    written.write_text(str(os.getppid()))
    written.replace(folder / f"{os.getpid()}.parent")  # whole: a reader never sees it half written
    deadline = time.monotonic() + 60
    while len(list(folder.glob("*.parent"))) < int(payload["count"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    return _result("pass", str(os.getppid()))

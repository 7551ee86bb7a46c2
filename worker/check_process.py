"""Running one check so that it can be stopped: the spec's ``ModelCheck`` runs inside a fresh
interpreter in its own process group; the worker polls for cancellation while it runs and kills
the whole group when asked, so a cancelled job stops within about a second. The check's memory
limit is the service's ``CHECK_MEMORY_LIMIT_BYTES`` unless the spec asks for less.

``python -m worker.check_process`` is that child: it reads ``{spec, model, allow_command,
memory_limit, golden}`` as JSON on stdin and writes ``{verdict, output}`` as JSON on stdout.
``golden`` is the path of the job's golden-values file, or null."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from checks.command import tail
from checks.isolated import safe_child_env
from checks.lifeline import die_with_parent_now
from reducer_core.verdict import Verdict, VerdictKind

POLL_S = 0.25
_ROOT = str(Path(__file__).resolve().parents[1])


class CheckStoppedError(Exception):
    """The check was killed because the job was cancelled (or ran out of time)."""


def run_stoppable(
    spec_text: str,
    model: Path,
    allow_command: bool,
    should_stop: Callable[[], bool],
    work_dir: Path,
    memory_limit_bytes: int | None = None,
    golden: Path | None = None,
) -> tuple[Verdict, str]:
    """Run the check on ``model``; ``should_stop`` is polled about every quarter second.
    ``memory_limit_bytes``: the check's limit when the spec gives none, and the most it may give.
    ``golden``: golden values for the spec's check (``build_check(spec, golden=...)``)."""
    request = json.dumps(
        {
            "spec": spec_text,
            "model": str(model),
            "allow_command": allow_command,
            "memory_limit": memory_limit_bytes,
            "golden": str(golden) if golden is not None else None,
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker.check_process"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        cwd=work_dir,
        env=runner_env(),
    )
    with proc:
        out, err = _communicate(proc, request.encode(), should_stop)
    return _result(proc.returncode, out, err)


def runner_env() -> dict[str, str]:
    """The check runner's environment: the allow-list of ``safe_child_env`` (no database, broker or
    cloud credentials, in any spelling), plus the project on ``PYTHONPATH``. Every check child the
    worker starts (spec kinds, command checks) descends from this process and inherits no more."""
    pythonpath = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p)
    return safe_child_env(extra={"PYTHONPATH": pythonpath})


def _communicate(proc: subprocess.Popen[bytes], request: bytes, should_stop: Callable[[], bool]) -> tuple[bytes, bytes]:
    """Feed the request and drain both pipes (so a chatty check cannot block), polling ``should_stop``."""
    payload: bytes | None = request
    while True:
        try:
            return proc.communicate(payload, timeout=POLL_S)
        except subprocess.TimeoutExpired:
            payload = None
            if should_stop():
                _kill(proc)
                raise CheckStoppedError() from None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the runner's group and the groups of its descendants (the spec's own check child
    starts a session of its own, so killing one group is not enough)."""
    groups = {proc.pid} | {_group_of(pid) for pid in _descendants(proc.pid)}
    groups.discard(os.getpgrp())
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    proc.wait()


def _parents() -> dict[int, int]:
    """pid -> parent pid, from /proc (Linux)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def _descendants(root: int) -> set[int]:
    parents = _parents()
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _group_of(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return pid


def _result(code: int, out: bytes, err: bytes) -> tuple[Verdict, str]:
    try:
        data = json.loads(out)
        return Verdict.from_json(data["verdict"]), str(data["output"])
    except (ValueError, KeyError, TypeError):
        text = err.decode(errors="replace")
        return Verdict(VerdictKind.INFRA_ERROR, "", f"the check runner exited with {code}: {tail(text, 500)}"), text


def main() -> None:
    die_with_parent_now()  # the check dies with its worker (checks.lifeline)
    from checks.spec import build_check, parse_check_spec

    request = json.loads(sys.stdin.read())
    spec = parse_check_spec(request["spec"])
    cap = request.get("memory_limit")
    if cap is not None:
        spec = dataclasses.replace(spec, memory_limit=min(spec.memory_limit or cap, cap))
    golden = request.get("golden")
    check = build_check(spec, golden=Path(golden) if golden else None, allow_command=bool(request["allow_command"]))
    verdict, output = check.run(Path(request["model"]))
    sys.stdout.write(json.dumps({"verdict": verdict.to_json(), "output": tail(output)}))


if __name__ == "__main__":
    main()

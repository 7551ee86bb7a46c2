"""A job's check: built once per attempt from the spec parsed at the edge (``CheckSpec``), run by
the worker itself, so a check is one child process (the spec kinds' ``checks.child``, forked by
this worker process's warm runner, ``checks.warm``: the runtimes are imported once per runner, not
once per check; or the command of ``kind: command``), in its own process group with the
allow-listed environment (``checks.isolated.safe_child_env``), the spec's time limit and the
memory limit below.

Cancellation: the worker runs checks inside a stop scope (``checks.cancel``) that polls the job
row, so a cancelled (or out-of-time) job kills its running check within about a second."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from checks.build import build_check
from checks.runtime_envs import RuntimeEnv, in_env
from checks.spec import CheckSpec, ModelCheck


def capped(spec: CheckSpec, memory_limit_bytes: int | None) -> CheckSpec:
    """``spec`` with the service's memory limit (``CHECK_MEMORY_LIMIT_BYTES``): the limit of a spec
    without ``memory_limit``, and the most a spec may ask for. None: no service limit."""
    if memory_limit_bytes is None:
        return spec
    return dataclasses.replace(spec, memory_limit=min(spec.memory_limit or memory_limit_bytes, memory_limit_bytes))


def job_check(
    spec: CheckSpec,
    work_dir: Path,
    allow_command: bool,
    memory_limit_bytes: int | None = None,
    golden: Path | None = None,
    env: RuntimeEnv | None = None,
) -> ModelCheck:
    """The runnable check of a job: ``golden`` feeds it (``build_check``), a command runs in
    ``work_dir`` (the iteration model's folder), command checks only when the operator allows them;
    ``env``: another onnxruntime release's environment it runs in (``worker.release_envs``)."""
    check = build_check(capped(spec, memory_limit_bytes), golden=golden, allow_command=allow_command, work_dir=work_dir)
    return check if env is None else in_env(check, env)

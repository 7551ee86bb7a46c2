"""A worker's other onnxruntime releases (``RUNTIME_ENVS``): the environments it advertises
(``Capabilities.runtime_envs``, in the farm's worker list) and runs a job's check in when the
job's spec ``requires`` an onnxruntime release its own environment does not hold.

The operator's recipe (a venv per release) is in docs/deployment.md. At start each environment is
probed (``checks.runtime_envs.probe_release``: its python imports what a check needs and
holds the release its label names); one that fails is logged and not advertised, so no job is
routed to a release the worker cannot run. A malformed ``RUNTIME_ENVS`` stops the worker with a
message saying how to write it."""

from __future__ import annotations

import dataclasses
import logging

from checks.capabilities import Capabilities
from checks.runtime_envs import RuntimeEnv, env_for_requirement, probe_release, runtime_envs_from_text
from checks.spec import CheckSpec
from reducer_core.errors import UsageError
from reducer_core.release_bisect import ReleaseError
from worker.context import RunnerContext

log = logging.getLogger("onnx_reducer.worker")


def load_runtime_envs(text: str) -> tuple[RuntimeEnv, ...]:
    """The environments of ``RUNTIME_ENVS`` that work (module doc)."""
    try:
        envs = runtime_envs_from_text(text)
    except ReleaseError as exc:
        raise UsageError(f"RUNTIME_ENVS: {exc}") from None
    working = []
    for env in envs:
        try:
            version = probe_release(env)
        except ReleaseError as exc:
            log.warning("RUNTIME_ENVS: onnxruntime %s is not offered: %s", env.release, exc)
            continue
        log.info("RUNTIME_ENVS: onnxruntime %s offered (its python imports onnxruntime %s)", env.release, version)
        working.append(env)
    return tuple(working)


def advertised_envs(text: str, capabilities: Capabilities) -> tuple[RuntimeEnv, ...]:
    """The environments of ``RUNTIME_ENVS`` whose releases ``capabilities`` advertise: what an
    embedded slot's job process (``worker.local_child``) runs checks in, without probing again."""
    try:
        envs = runtime_envs_from_text(text)
    except ReleaseError:
        return ()
    return tuple(env for env in envs if env.release in capabilities.runtime_envs)


def with_runtime_envs(capabilities: Capabilities, envs: tuple[RuntimeEnv, ...]) -> Capabilities:
    """``capabilities`` advertising ``envs``' releases (never their paths: the list is public)."""
    return dataclasses.replace(capabilities, runtime_envs=tuple(env.release for env in envs))


def job_env(ctx: RunnerContext, spec: CheckSpec) -> RuntimeEnv | None:
    """The environment ``spec``'s check runs in on this worker (None: its own)."""
    own = ctx.capabilities.onnxruntime if ctx.capabilities is not None else None
    return env_for_requirement(spec.requires.onnxruntime, own, ctx.runtime_envs)


def job_runtime(ctx: RunnerContext, spec: CheckSpec | None) -> Capabilities | None:
    """What ``spec``'s verdicts are shared under in the farm cache: the worker's runtime, with the
    release of the environment the check runs in."""
    env = job_env(ctx, spec) if spec is not None else None
    if env is None or ctx.runtime is None:
        return ctx.runtime
    return dataclasses.replace(ctx.runtime, onnxruntime=env.release, runtime_envs=())

"""A check as one *slot* of a parallel reduction runs it (``onnx-reducer reduce --jobs N``): in the
slot's own working folder, with the slot's device.

    check = for_slot(check, folder=Path("onnx_reducer_slots/slot2"), extra_env={"CUDA_VISIBLE_DEVICES": "1"})

A command (``--check``, or a spec of kind ``command``) runs with its working directory in
``folder`` (``reducer_cli.slots``: a mirror of the working folder at the same path below the slot's
root, so that relative paths mean what they mean without slots), where the slot's iteration
artifact has the name the command uses; ``PWD`` names that folder, as a shell that changed into it
would. The other kinds read the model path they are given and run in a private folder anyway, so
only their environment changes. ``extra_env`` is added to the environment the check would have had."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from checks.command import CommandCheck
from checks.interactive import InteractiveCheck
from checks.isolated import IsolatedSpecCheck, RepeatedCheck, SpecCommandCheck, safe_child_env
from checks.spec import ModelCheck
from reducer_core.errors import UsageError

DEVICE_ENV = "CUDA_VISIBLE_DEVICES"


def for_slot(check: ModelCheck, folder: Path | None, extra_env: Mapping[str, str]) -> ModelCheck:
    """A copy of ``check`` that runs in ``folder`` (None: where it ran before) with ``extra_env``."""
    if isinstance(check, CommandCheck):
        base = os.environ if check.env is None else check.env
        cwd = folder if folder is not None else check.cwd
        here = {"PWD": str(folder)} if folder is not None and "PWD" in base else {}
        return dataclasses.replace(check, env={**base, **here, **extra_env}, cwd=cwd, compiled=[])
    if isinstance(check, SpecCommandCheck):
        env = {**(safe_child_env() if check.env is None else check.env), **extra_env}
        return dataclasses.replace(check, env=env, cwd=folder if folder is not None else check.cwd)
    if isinstance(check, IsolatedSpecCheck):
        return dataclasses.replace(check, extra_env={**check.extra_env, **extra_env})
    if isinstance(check, RepeatedCheck):
        return RepeatedCheck(for_slot(check.base, folder, extra_env), check.repeat, check.fail_if)
    if isinstance(check, InteractiveCheck):
        raise UsageError(
            "Interactive mode (no --check) asks about one model at a time: give --check COMMAND or "
            "--check-spec SPEC to run several checks at once (--jobs, --devices)."
        )
    raise TypeError(f"{type(check).__name__} cannot run in a slot of a parallel reduction")

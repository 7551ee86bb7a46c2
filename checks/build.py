"""Build a runnable check from a parsed spec: the spec is data (``checks.spec``), the runnable
checks live in ``checks.isolated``; this module joins the two so neither imports the other."""

from __future__ import annotations

from pathlib import Path

from checks.isolated import IsolatedSpecCheck, RepeatedCheck, SpecCommandCheck
from checks.spec import CheckSpec, CheckSpecError, ModelCheck


def build_check(
    spec: CheckSpec, golden: Path | None = None, allow_command: bool = True, work_dir: Path | None = None
) -> ModelCheck:
    """A runnable check for ``spec``. ``golden``: a golden-values file (``onnx-reducer golden``)
    that feeds every candidate's boundary inputs (required for kind 'golden'). ``allow_command``
    False (the service's default) refuses kind 'command'; ``work_dir``: where a command runs."""
    if spec.kind == "golden" and golden is None:
        raise CheckSpecError("kind: 'golden' compares against stored values: give a golden file (--golden GOLDEN)")
    if spec.kind == "command":
        if not allow_command:
            raise CheckSpecError(
                "kind: 'command' runs an arbitrary program and is disabled here; the operator must enable "
                "command checks explicitly (they are remote code execution in a shared service)"
            )
        base: ModelCheck = SpecCommandCheck(spec, cwd=work_dir)
    else:
        base = IsolatedSpecCheck(spec, golden)
    if spec.repeat > 1:
        return RepeatedCheck(base, spec.repeat, spec.fail_if)
    return base

"""The clean environment a bug-report bundle's ``repro.py`` is checked in before the bundle is zipped.

What a person who receives the bundle has: ``pip install onnx onnxruntime numpy`` (plus TensorRT
and Polygraphy for a TensorRT target) and nothing of onnx-reducer. Built without installing
anything:

- ``site/``: symlinks to the top-level files and folders of those distributions and of every
  distribution they require (their requirements without extras, recursively), as this
  interpreter has them installed;
- this interpreter run with ``-S`` (no ``site``: no site-packages, no ``.pth`` files, no user site)
  and ``-B``, with ``PYTHONPATH`` set to ``site/`` alone: only those packages import;
- ``bin/python`` and ``bin/python3``: the same clean interpreter for a command that runs ``python``;
- the environment: the allow-listed part of this process's (``checks.isolated.safe_child_env``),
  ``PYTHONPATH`` replaced, ``VIRTUAL_ENV`` dropped, and ``PATH`` without the folders that hold
  this interpreter's scripts or an ``onnx-reducer`` executable, ``bin/`` first: a command the
  recipient would not have (``onnx-reducer inspect ...``) is not found.
"""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from checks.isolated import safe_child_env

CLEAN_PACKAGES = ("onnx", "onnxruntime", "onnxruntime-gpu", "numpy")
TENSORRT_PACKAGES = ("tensorrt", "polygraphy")
PROJECT_COMMAND = "onnx-reducer"


@dataclass(frozen=True)
class CleanEnvironment:
    """``python``: the command line that starts the clean interpreter; ``env``: its environment."""

    python: list[str]
    env: dict[str, str]
    packages: list[str]

    def describe(self) -> str:
        flags = " ".join(self.python[1:])
        return (
            f"`python {flags} repro.py` with PYTHONPATH holding only {', '.join(self.packages)} and their "
            "dependencies (no site-packages), PATH without onnx-reducer"
        )


def closure(names: Iterable[str]) -> list[str]:
    """The installed distributions ``names`` need: themselves and their requirements without
    extras, recursively (names not installed are skipped)."""
    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        key = str(dist.metadata["Name"]).lower()
        if key in seen:
            continue
        seen[key] = dist
        for text in dist.requires or []:
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return sorted(seen)


def _link_packages(site: Path, distributions: Iterable[str]) -> None:
    site.mkdir(parents=True, exist_ok=True)
    for name in distributions:
        dist = importlib.metadata.distribution(name)
        for top in sorted({Path(str(f)).parts[0] for f in dist.files or [] if Path(str(f)).parts}):
            if top.startswith("..") or top.endswith(".dist-info") or top == "__pycache__" or (site / top).exists():
                continue
            source = Path(str(dist.locate_file(top)))
            if source.exists():
                (site / top).symlink_to(source)


def _project_bins() -> set[str]:
    """Folders on PATH that hold this interpreter's scripts or an onnx-reducer executable."""
    bins = {str(Path(sysconfig.get_path("scripts")).resolve()), str(Path(sys.executable).parent.resolve())}
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if folder and (Path(folder) / PROJECT_COMMAND).exists():
            bins.add(str(Path(folder).resolve()))
    return bins


def clean_environment(folder: Path, tensorrt: bool = False, base: Mapping[str, str] | None = None) -> CleanEnvironment:
    """A clean environment under ``folder`` (module docstring); ``tensorrt`` adds TensorRT and
    Polygraphy where installed; ``base``: the environment to start from (default this process's)."""
    wanted = CLEAN_PACKAGES + (TENSORRT_PACKAGES if tensorrt else ())
    packages = closure(wanted)
    site = folder / "site"
    _link_packages(site, packages)
    python = [sys.executable, "-S", "-B"]
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.join(python)} "$@"\n')
        wrapper.chmod(0o755)
    env = safe_child_env(base=base)
    env.pop("VIRTUAL_ENV", None)
    env["PYTHONPATH"] = str(site)
    env["PYTHONNOUSERSITE"] = "1"
    project = _project_bins()
    kept = [p for p in env.get("PATH", "").split(os.pathsep) if p and str(Path(p).resolve()) not in project]
    env["PATH"] = os.pathsep.join([str(bin_dir), *kept])
    shown = [p for p in packages if p in wanted or p.replace("_", "-") in wanted]
    return CleanEnvironment(python, env, shown)

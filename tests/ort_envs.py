"""Side-by-side onnxruntime releases for release-bisection tests: one virtual environment per
release (``python -m venv`` + ``pip install onnxruntime==X`` and what a check's child imports), cached under
``build/ort-envs/`` (git-ignored) so that a rerun reuses them. A release whose environment cannot be
built (no network to PyPI, no wheel for this Python) makes the caller skip with the reason.

A first build takes about a minute per release (50 s for 1.30.0 with an empty pip cache on a
loaded 2-core machine); a lock per release lets two test processes (pytest-xdist workers) share
it: the second waits and reuses the first's."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

# Three releases with wheels for CPython 3.11 on PyPI, in version order.
RELEASES = ("1.30.0", "1.31.0", "1.32.0")
# what a check's child imports besides onnxruntime (checks.runtime_envs.CHILD_PACKAGES)
PACKAGES = ("onnx", "numpy", "pyyaml", "regex", "packaging", "onnxconverter-common")
CACHE = Path(__file__).resolve().parents[1] / "build" / "ort-envs"
_INSTALL_TIMEOUT_S = 900


class EnvUnavailableError(RuntimeError):
    """The environment could not be built (pip could not reach PyPI, or no wheel)."""


def env_python(version: str, cache: Path = CACHE) -> Path:
    """The python of a venv holding ``onnxruntime==version`` (built once, then reused)."""
    folder = cache / f"ort-{version}"
    python = folder / "bin" / "python"
    ready = folder / ".ready"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".ort-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes build one release once
        wanted = " ".join((version, *PACKAGES))
        if not ready.exists() or ready.read_text() != wanted:
            _build(folder, version)
            ready.write_text(wanted)
    return python


def _build(folder: Path, version: str) -> None:
    """A fresh venv: what a build cut short left (a venv without pip, a half-installed wheel: a
    failed pip, a test run's timeout) is removed first, and again when this build fails."""
    shutil.rmtree(folder, ignore_errors=True)
    try:
        _run([sys.executable, "-m", "venv", str(folder)], "create the venv")
        pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        _run([*pip, f"onnxruntime=={version}", *PACKAGES], f"pip install onnxruntime=={version}")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _run(command: list[str], what: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_INSTALL_TIMEOUT_S, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise EnvUnavailableError(f"{what}: no answer in {_INSTALL_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        raise EnvUnavailableError(f"{what} failed: {(done.stderr or done.stdout).strip()[-400:]}")


def all_env_pythons(cache: Path = CACHE) -> dict[str, Path]:
    """``{release: python}`` for every release in ``RELEASES``."""
    return {version: env_python(version, cache) for version in RELEASES}


def env_pythons_or_skip(cache: Path = CACHE) -> dict[str, Path]:
    """``all_env_pythons``, or the calling test skipped with the reason it could not be built."""
    import pytest  # here: a check's child imports this module in a release's venv, which has no pytest

    try:
        return all_env_pythons(cache)
    except EnvUnavailableError as exc:
        pytest.skip(f"cannot build the onnxruntime venvs (is PyPI reachable?): {exc}")


def report_version(payload: dict[str, object]) -> dict[str, str]:
    """A check child's entry (``checks.child``) that reports the onnxruntime it imports as its
    signature: which environment's interpreter ran the child."""
    import onnxruntime  # the child's own onnxruntime, imported where it runs

    version = str(onnxruntime.__version__)
    return {"kind": "fail", "signature": f"onnxruntime={version}", "detail": sys.executable, "output": ""}


if __name__ == "__main__":
    for release, python in all_env_pythons().items():
        print(release, python)

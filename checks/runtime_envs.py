"""Runtime environments: other Python environments, each holding one onnxruntime release, in
which a check can run (``onnx-reducer bisect-releases --runtime-env 1.20=PYTHON``, a worker's
``RUNTIME_ENVS``).

A check runs in an environment by starting its child with that environment's interpreter: a spec
check's isolated child (``checks.isolated.run_isolated``: the project comes on ``PYTHONPATH``, so
the environment needs only onnxruntime and ``CHILD_PACKAGES``), a command check with the environment's
``bin`` folder first on ``PATH`` (its ``python`` is the environment's) and ``VIRTUAL_ENV`` set.

``probe_release`` imports a check child's modules in an environment's interpreter and asks which
onnxruntime it holds, so that an environment missing a package, or a label
that does not match what is installed (``1.21=`` an environment holding 1.20) is refused before
any check runs."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from checks.isolated import IsolatedSpecCheck, RepeatedCheck, SpecCommandCheck, child_env, safe_child_env
from checks.requirements import version_matches
from checks.spec import ModelCheck
from reducer_core.release_bisect import ReleaseError, parse_release_envs, release_key, split_release_envs

PROBE_TIMEOUT_S = 120.0
CHILD_PACKAGES = ("onnx", "numpy", "pyyaml", "regex", "packaging", "onnxconverter-common")
"""What a check's child imports besides onnxruntime (checks.kinds, checks.spec): an environment needs them."""
_PROBE = (
    "import json, checks.child, checks.kinds, onnx, onnxruntime; "
    "print(json.dumps({'onnxruntime': onnxruntime.__version__, 'onnx': onnx.__version__}))"
)


@dataclass(frozen=True)
class RuntimeEnv:
    release: str  # the onnxruntime version the environment holds, as the operator wrote it
    python: str  # its interpreter

    def to_json(self) -> dict[str, str]:
        return {"release": self.release, "python": self.python}


def runtime_envs(items: Iterable[str], what: str = "--runtime-env") -> list[RuntimeEnv]:
    """``VERSION=PYTHON`` items as environments, oldest release first (``ReleaseError`` when one
    is malformed); a relative path is taken from the current folder (a venv's ``bin/python`` link
    is kept as it is: resolving it would leave the venv)."""
    found = parse_release_envs(items, what)
    ordered = sorted(found, key=release_key)
    return [RuntimeEnv(release, os.path.abspath(os.path.expanduser(found[release]))) for release in ordered]


def runtime_envs_from_text(text: str, what: str = "RUNTIME_ENVS") -> list[RuntimeEnv]:
    """A worker's ``RUNTIME_ENVS`` (``1.20=/opt/ort120/bin/python,1.21=...``)."""
    return runtime_envs(split_release_envs(text), what)


def probe_release(env: RuntimeEnv) -> str:
    """The onnxruntime version ``env``'s interpreter imports; ``ReleaseError`` (saying how to fix it)
    when it cannot start, cannot import what a check needs, or holds another release than its label."""
    where = f"the environment of {env.release}"
    if not Path(env.python).is_file() or not os.access(env.python, os.X_OK):
        raise ReleaseError(f"{where}: '{env.python}' is not an executable file; give the python of a venv")
    try:
        done = subprocess.run(
            [env.python, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env=child_env(),  # the project on PYTHONPATH, as a check's child has it
            cwd="/",
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReleaseError(f"{where}: its python did not start ({type(exc).__name__})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise ReleaseError(
            f"{where}: its python cannot run a check ({last}); install what a check needs there: "
            f"{env.python} -m pip install onnxruntime=={env.release} {' '.join(CHILD_PACKAGES)}"
        )
    version = str(json.loads(done.stdout.strip().splitlines()[-1])["onnxruntime"])
    if release_key(version) != release_key(env.release) and not version.startswith(env.release + "."):
        raise ReleaseError(f"{where}: its python holds onnxruntime {version}, not {env.release}; fix the label")
    return version


def in_env(check: ModelCheck, env: RuntimeEnv) -> ModelCheck:
    """``check`` run in ``env``'s interpreter (module doc); a check of another type is refused."""
    if isinstance(check, IsolatedSpecCheck):
        return dataclasses.replace(check, python=env.python)
    if isinstance(check, SpecCommandCheck):
        return dataclasses.replace(check, env=env_variables(env, check.env))
    if isinstance(check, RepeatedCheck):
        return RepeatedCheck(in_env(check.base, env), check.repeat, check.fail_if)
    raise ReleaseError(f"a {type(check).__name__} cannot run in another environment; use a --check-spec check")


def env_variables(env: RuntimeEnv, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A command check's environment inside ``env``: its ``bin`` folder first on ``PATH``."""
    variables = dict(safe_child_env() if base is None else base)
    folder = Path(env.python).parent
    variables["PATH"] = os.pathsep.join(p for p in (str(folder), variables.get("PATH", "")) if p)
    variables["VIRTUAL_ENV"] = str(folder.parent)
    return variables


def env_for_requirement(wanted: str | None, own: str | None, envs: Iterable[RuntimeEnv]) -> RuntimeEnv | None:
    """The environment a check whose spec ``requires.onnxruntime: wanted`` runs in on a worker whose
    own onnxruntime is ``own``: None when there is no such requirement or ``own`` meets it (the
    check runs as usual), else the newest environment that meets it (None: none does)."""
    if wanted is None or version_matches(wanted, own):
        return None
    matching = [env for env in envs if version_matches(wanted, env.release)]
    return max(matching, key=lambda env: release_key(env.release)) if matching else None

"""A worker's other onnxruntime releases (RUNTIME_ENVS): advertised, matched against a spec's
``requires.onnxruntime``, and the job's check run in that release's environment (real venvs:
tests/ort_envs.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import helper

from checks.capabilities import Capabilities, unmet
from checks.isolated import IsolatedSpecCheck
from checks.requirements import parse_requirements
from checks.runtime_envs import RuntimeEnv, env_for_requirement, in_env, probe_release
from checks.spec import parse_check_spec
from reducer_core.errors import UsageError
from reducer_core.release_bisect import ReleaseError
from reducer_core.verdict import VerdictKind
from tests.models import make_model
from tests.ort_envs import RELEASES, env_pythons_or_skip
from worker.checking import job_check
from worker.release_envs import load_runtime_envs, with_runtime_envs

OLD, MIDDLE, NEW = RELEASES


@pytest.fixture(scope="module")
def pythons() -> dict[str, Path]:
    return env_pythons_or_skip()


def test_capabilities_advertise_releases_and_meet_requirements() -> None:
    offered = Capabilities(onnxruntime=NEW, runtime_envs=(OLD, MIDDLE))
    assert Capabilities.from_json(json.loads(json.dumps(offered.to_json()))) == offered
    assert unmet(parse_requirements({"onnxruntime": OLD}), offered) == []
    assert unmet(parse_requirements({"onnxruntime": NEW}), offered) == []
    assert unmet(parse_requirements({"onnxruntime": "1.29"}), offered) == ["onnxruntime ==1.29.*"]
    assert unmet(parse_requirements({"onnxruntime": OLD}), Capabilities(onnxruntime=NEW)) != []


def test_the_environment_a_requirement_picks() -> None:
    envs = [RuntimeEnv(OLD, "/a/python"), RuntimeEnv(MIDDLE, "/b/python")]
    assert env_for_requirement(None, NEW, envs) is None
    assert env_for_requirement(f"=={NEW}", NEW, envs) is None  # the worker's own release
    assert env_for_requirement(f"=={OLD}", NEW, envs) == envs[0]
    assert env_for_requirement(f"<{NEW}", NEW, envs) == envs[1]  # the newest that meets it
    assert env_for_requirement("==1.29.*", NEW, envs) is None


def test_runtime_envs_setting_probes_each_environment(pythons: dict[str, Path]) -> None:
    text = f"{OLD}={pythons[OLD]}, {MIDDLE}={pythons[OLD]},{NEW}=/nowhere/bin/python"
    envs = load_runtime_envs(text)  # the mislabelled and the missing environment are left out
    assert envs == (RuntimeEnv(OLD, str(pythons[OLD])),)
    assert with_runtime_envs(Capabilities(onnxruntime="1.32.0"), envs).runtime_envs == (OLD,)
    with pytest.raises(UsageError, match=r"RUNTIME_ENVS.*VERSION=PYTHON"):
        load_runtime_envs(str(pythons[OLD]))


def test_job_check_runs_in_the_environment(pythons: dict[str, Path], tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], ["x"], ["y"]), model)
    program = "import sys, onnxruntime as o; print('ort', o.__version__); sys.exit(1)"
    spec = parse_check_spec(
        json.dumps({"kind": "command", "command": ["python", "-c", program], "requires": {"onnxruntime": OLD}})
    )
    check = job_check(spec, tmp_path, allow_command=True, env=RuntimeEnv(OLD, str(pythons[OLD])))
    verdict, output = check.run(model)
    assert verdict.kind is VerdictKind.FAIL and f"ort {OLD}" in output


def test_an_environment_without_what_a_check_needs_is_refused(tmp_path: Path) -> None:
    """A venv holding nothing (no onnxruntime, no yaml): the probe names the pip command to run."""
    folder = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    env = RuntimeEnv(OLD, str(folder / "bin" / "python"))
    with pytest.raises(ReleaseError, match=rf"cannot run a check .*pip install onnxruntime=={re.escape(OLD)} onnx"):
        probe_release(env)


def test_an_environment_gone_since_its_probe_is_an_infra_error_without_its_path(tmp_path: Path) -> None:
    """A RUNTIME_ENVS interpreter removed after the worker probed it: the check's verdict and output
    (shown to the job's user) say why, not where on the server."""
    model = tmp_path / "model.onnx"
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], ["x"], ["y"]), model)
    gone = tmp_path / "server-only-folder" / "bin" / "python"
    spec = parse_check_spec(json.dumps({"kind": "error", "target": {"runtime": "onnxruntime"}}))
    verdict, output = in_env(IsolatedSpecCheck(spec), RuntimeEnv(OLD, str(gone))).run(model)
    assert verdict.kind is VerdictKind.INFRA_ERROR and "No such file" in verdict.detail
    assert "server-only-folder" not in verdict.detail + output

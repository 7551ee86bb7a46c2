"""``onnx-reducer bisect-releases`` against three real onnxruntime releases installed side by side
(one venv each, tests/ort_envs.py: built once under build/ort-envs/), with a check that fails from
the second release on."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import onnx
import pytest
from onnx import helper

from checks.isolated import IsolatedSpecCheck
from checks.runtime_envs import RuntimeEnv, in_env, probe_release
from checks.spec import parse_check_spec
from reducer_cli.main import run
from reducer_core.release_bisect import ReleaseError, max_release_checks
from reducer_core.verdict import VerdictKind
from tests.models import make_model
from tests.ort_envs import RELEASES, env_pythons_or_skip

# Fails (exit 1) when the interpreter running it imports onnxruntime >= the second release.
SECOND = RELEASES[1]
_VERSION_TEST = (
    "import sys, onnxruntime as o; v = tuple(int(p) for p in o.__version__.split('.')[:2]); "
    f"sys.exit(1 if v >= {tuple(int(p) for p in SECOND.split('.')[:2])} else 0)"
)
# The same, but fails only on every second run (a counter file beside the model): a flaky check.
_FLAKY_TEST = (
    "import pathlib, sys, onnxruntime as o; c = pathlib.Path(sys.argv[1]); n = int(c.read_text() or 0) + 1 "
    "if c.exists() else 1; c.write_text(str(n)); v = tuple(int(p) for p in o.__version__.split('.')[:2]); "
    f"sys.exit(1 if v >= {tuple(int(p) for p in SECOND.split('.')[:2])} and n % 2 == 0 else 0)"
)


@pytest.fixture(scope="module")
def pythons() -> dict[str, Path]:
    return env_pythons_or_skip()


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], ["x"], ["y"]), path)
    return path


def env_args(pythons: dict[str, Path]) -> list[str]:
    args: list[str] = []
    for release in reversed(RELEASES):  # any order: the command sorts them
        args += ["--runtime-env", f"{release}={pythons[release]}"]
    return args


def write_spec(tmp_path: Path, program: str, *extra: str) -> Path:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"kind": "command", "command": ["python", "-c", program, *extra]}))
    return spec


def test_names_first_failing_and_last_passing_release(
    pythons: dict[str, Path], model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "summary.json"
    spec = write_spec(tmp_path, _VERSION_TEST)
    argv = ["bisect-releases", str(model), "--check-spec", str(spec), *env_args(pythons)]
    assert run([*argv, "--summary-json", str(summary)]) == 0
    assert capsys.readouterr().out.strip() == SECOND
    data = json.loads(summary.read_text())
    assert data["first_failing"] == SECOND and data["last_passing"] == RELEASES[0]
    assert data["first_failing_verdict"]["verdict"]["kind"] == "fail"
    assert data["last_passing_verdict"]["verdict"]["kind"] == "pass"
    assert data["checks"] <= max_release_checks(len(RELEASES)) == 3
    assert data["runs"] == data["checks"]  # not flaky: one run per release
    assert [item["state"] for item in data["strip"]] == ["pass", "fail", "fail"]


def test_flaky_check_uses_its_repeats(pythons: dict[str, Path], model: Path, tmp_path: Path) -> None:
    counter = tmp_path / "runs.txt"
    spec = write_spec(tmp_path, _FLAKY_TEST, str(counter))
    summary = tmp_path / "summary.json"
    argv = ["bisect-releases", str(model), "--check-spec", str(spec), *env_args(pythons)]
    # taken as deterministic, the newest release's first (passing) run ends the search: nothing to bisect
    assert run([*argv, "--summary-json", str(summary)]) == 3
    assert json.loads(summary.read_text())["outcome"] == "newest-passes"
    counter.unlink()
    assert run([*argv, "--flaky", "--summary-json", str(summary)]) == 0
    data = json.loads(summary.read_text())
    assert data["first_failing"] == SECOND and data["last_passing"] == RELEASES[0]
    assert data["flaky"] and "comes and goes" in data["flaky_message"]
    assert data["checks"] <= 3 < data["runs"]
    newest = next(v for v in data["judged"] if v["release"] == RELEASES[-1])
    assert (newest["runs"], newest["failures"]) == (2, 1)  # a pass, then (run again) the failure
    assert data["last_passing_verdict"]["runs"] > 1  # a pass counts after repeats
    repeats = [v["repeat"] for v in data["verdicts"] if v["release"] == RELEASES[0]]
    assert repeats == list(range(len(repeats)))


def test_isolated_spec_child_runs_in_the_environments_python(pythons: dict[str, Path], model: Path) -> None:
    """A spec check's child (python -m checks.child) started with another release's interpreter
    imports that release (the entry reports the version it ran with as the signature)."""
    spec = parse_check_spec(json.dumps({"kind": "error", "target": {"runtime": "onnxruntime"}}))
    base = IsolatedSpecCheck(spec, entry="tests.ort_envs:report_version")
    for release in RELEASES:
        verdict, _ = in_env(base, RuntimeEnv(release, str(pythons[release]))).run(model)
        assert (verdict.kind, verdict.signature) == (VerdictKind.FAIL, f"onnxruntime={release}")


def test_mislabelled_environment_is_refused(pythons: dict[str, Path], model: Path, tmp_path: Path) -> None:
    with pytest.raises(ReleaseError, match=f"holds onnxruntime {RELEASES[0]}, not {SECOND}"):
        probe_release(RuntimeEnv(SECOND, str(pythons[RELEASES[0]])))
    spec = write_spec(tmp_path, _VERSION_TEST)
    argv = ["--runtime-env", f"{RELEASES[0]}={pythons[RELEASES[0]]}", "--runtime-env", f"{SECOND}={tmp_path}/nope"]
    assert run(["bisect-releases", str(model), "--check-spec", str(spec), *argv]) == 2


def test_one_release_is_bad_usage(pythons: dict[str, Path], model: Path, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, _VERSION_TEST)
    argv = ["bisect-releases", str(model), "--check-spec", str(spec), "--runtime-env", f"{SECOND}=/x/python"]
    assert run(argv) == 2


def test_the_bundle_repro_prints_the_releases_to_pin(
    pythons: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reduce --bundle, then bisect-releases --bundle: the bundle's repro.py prints both releases."""
    monkeypatch.chdir(tmp_path)
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name="relu"),
        helper.make_node("Mul", ["h", "h"], ["y"], name="mul"),
    ]
    onnx.save(make_model(nodes, ["x"], ["y"]), "model.onnx")
    Path("op.yaml").write_text("kind: op-present\nops: [Mul]\n")
    assert run(["reduce", "model.onnx", "-o", "min_bad.onnx", "--check-spec", "op.yaml", "--bundle", "bug.zip"]) == 0
    spec = write_spec(tmp_path, _VERSION_TEST)
    argv = ["bisect-releases", "min_bad.onnx", "--check-spec", str(spec), *env_args(pythons), "--bundle", "bug.zip"]
    assert run(argv) == 0
    with zipfile.ZipFile("bug.zip") as archive:
        archive.extractall("bug")
    repro = subprocess.run(
        [sys.executable, "repro.py"], cwd="bug", capture_output=True, text=True, timeout=300, check=False
    )
    assert repro.returncode == 1, repro.stdout + repro.stderr  # REPRODUCED (the op-present check)
    assert f"First failing release: {SECOND}; last passing release: {RELEASES[0]}." in repro.stdout
    assert f"pip install onnxruntime=={RELEASES[0]}" in repro.stdout

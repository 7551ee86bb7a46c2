"""What a check's process may see of the environment: an allow-list, never the service's secrets
(whatever their spelling); the command line's own ``--check`` command keeps the user's full one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from checks.build import build_check
from checks.command import CommandCheck
from checks.isolated import run_isolated, safe_child_env
from checks.spec import parse_check_spec
from reducer_core.verdict import VerdictKind

SECRETS = {
    "database_url": "postgresql://u:p@db/x",
    "DATABASE_URL": "postgresql://u:p@db/x",
    "REDIS_URL": "redis://:p@redis/0",
    "CELERY_BROKER_URL": "redis://:p@redis/1",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "SENTRY_DSN": "https://key@sentry/1",
    "ONNX_REDUCER_API_TOKEN": "tok",
    "SOME_UNKNOWN_SETTING": "x",
}
KEPT = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/u",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "CUDA_VISIBLE_DEVICES": "0",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "TENSORRT_HOME": "/opt/trt",
    "TRT_LOGGER": "x",
    "OMP_NUM_THREADS": "2",
    "ORT_LOGGING_LEVEL": "3",
    "VIRTUAL_ENV": "/venv",
    "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
}
PRINT_ENV = "import os; print('\\n'.join(sorted(os.environ)))"


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


def test_safe_child_env_is_an_allow_list() -> None:
    env = safe_child_env(base={**SECRETS, **KEPT})
    assert env == KEPT
    assert safe_child_env({"EXTRA": "1"}, base={"PATH": "/bin", "database_url": "x"}) == {"PATH": "/bin", "EXTRA": "1"}


@pytest.mark.usefixtures("secrets")
def test_an_isolated_check_process_sees_no_secret() -> None:
    verdict, output = run_isolated({"entry": "tests.checks.helpers:environment"}, 60)
    assert verdict.kind is VerdictKind.PASS, output
    names = set(output.split())
    assert "PATH" in names and "PYTHONPATH" in names
    assert not names & set(SECRETS)


@pytest.mark.usefixtures("secrets")
def test_a_spec_command_check_sees_no_secret(tmp_path: Path) -> None:
    spec = parse_check_spec(f"kind: command\ncommand: [{sys.executable!r}, -c, {PRINT_ENV!r}]\ntimeout: 60")
    verdict, output = build_check(spec).run(tmp_path / "model.onnx")
    assert verdict.kind is VerdictKind.PASS, output
    names = set(output.split())
    assert "PATH" in names
    assert not names & set(SECRETS)


@pytest.mark.usefixtures("secrets")
def test_the_command_lines_own_check_command_keeps_the_users_environment() -> None:
    verdict, output = CommandCheck([sys.executable, "-c", PRINT_ENV], timeout_s=60).run()
    assert verdict.kind is VerdictKind.PASS, output
    assert set(SECRETS) <= set(output.split())

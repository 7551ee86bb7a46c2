"""docker-compose.yml, Dockerfile and Dockerfile.gpu (Docker does not run here): parsed and
linted, and their commands are exactly the ones the service tests run."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.service.commands import API_COMMAND, GPU_WORKER_COMMAND, MIGRATE_COMMAND, WORKER_COMMAND

ROOT = Path(__file__).resolve().parents[2]
INSTRUCTIONS = {"FROM", "RUN", "CMD", "ENV", "WORKDIR", "COPY", "USER", "EXPOSE", "ENTRYPOINT", "ARG", "LABEL"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return document


def test_compose_services_and_commands(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "migrate", "api", "worker-cpu", "worker-gpu"}
    assert services["migrate"]["command"] == MIGRATE_COMMAND
    assert services["api"]["command"] == API_COMMAND
    assert services["worker-cpu"]["command"] == WORKER_COMMAND
    assert services["worker-gpu"]["command"] == GPU_WORKER_COMMAND
    for name in ("postgres", "redis", "api"):
        assert services[name]["healthcheck"]["test"][0] == "CMD"
    for name in ("migrate", "api", "worker-cpu", "worker-gpu"):
        env = services[name]["environment"]
        assert {"DATABASE_URL", "REDIS_URL", "DATA_DIR"} <= set(env)
        assert "changeme" not in json.dumps(env)
    for name in ("api", "worker-cpu", "worker-gpu"):
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
        assert "artifacts:/data" in services[name]["volumes"]
    devices = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert services["worker-gpu"]["build"]["dockerfile"] == "Dockerfile.gpu"


def _instructions(path: Path) -> list[tuple[str, str]]:
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        current += raw.rstrip("\\").strip() + " "
        if not raw.endswith("\\"):
            keyword, _, rest = current.strip().partition(" ")
            lines.append((keyword, rest))
            current = ""
    return lines


@pytest.mark.parametrize(
    ("name", "base", "command"),
    [("Dockerfile", "python:3.11", API_COMMAND), ("Dockerfile.gpu", "nvcr.io/nvidia/tensorrt:", GPU_WORKER_COMMAND)],
)
def test_dockerfile_lint(name: str, base: str, command: list[str]) -> None:
    instructions = _instructions(ROOT / name)
    assert instructions[0][0] == "FROM" and instructions[0][1].startswith(base)
    assert all(keyword in INSTRUCTIONS for keyword, _ in instructions)
    for keyword, rest in instructions:
        if keyword == "RUN":
            subprocess.run(["bash", "-n", "-c", rest], check=True)
            assert "curl" not in rest and "| sh" not in rest
        if keyword == "COPY":
            for source in shlex.split(rest)[:-1]:
                assert (ROOT / source).exists(), source
    cmd = [json.loads(rest) for keyword, rest in instructions if keyword == "CMD"]
    assert cmd == [command]
    assert ("USER", "reducer") in instructions
    copied = {shlex.split(rest)[0] for keyword, rest in instructions if keyword == "COPY"}
    assert {"persistence", "api", "worker", "migrations"} <= copied

"""docker-compose.yml, Dockerfile and Dockerfile.gpu (Docker does not run here): parsed and
linted, and their commands are exactly the ones the service tests run."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from persistence.config import ServiceSettings
from tests.service.commands import API_COMMAND, GPU_WORKER_COMMAND, MIGRATE_COMMAND, WORKER_COMMAND

ROOT = Path(__file__).resolve().parents[2]
INSTRUCTIONS = {"FROM", "RUN", "CMD", "ENV", "WORKDIR", "COPY", "USER", "EXPOSE", "ENTRYPOINT", "ARG", "LABEL"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return document


def test_compose_services_and_commands(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "minio", "migrate", "api", "worker-cpu", "worker-gpu"}
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


def test_compose_keeps_artifacts_in_minio(compose: dict[str, Any]) -> None:
    """The distributed setup stores artifacts in its MinIO bucket by default; the secret comes from
    the operator's environment, never from the file."""
    services = compose["services"]
    minio = services["minio"]
    assert minio["command"][:2] == ["server", "/data"] and minio["healthcheck"]["test"][0] == "CMD"
    assert minio["environment"]["MINIO_ROOT_PASSWORD"].startswith("${MINIO_ROOT_PASSWORD:?")
    for name in ("api", "worker-cpu", "worker-gpu"):
        env = services[name]["environment"]
        assert env["ARTIFACT_STORE"] == "s3" and env["S3_ENDPOINT_URL"] == "http://minio:9000"
        assert env["S3_BUCKET"] and env["AWS_ACCESS_KEY_ID"]
        assert env["AWS_SECRET_ACCESS_KEY"] == minio["environment"]["MINIO_ROOT_PASSWORD"]
        assert services[name]["depends_on"]["minio"] == {"condition": "service_healthy"}
    settings = ServiceSettings(**_resolved(services["api"]["environment"]))
    config = settings.s3_config()
    assert config is not None and (config.endpoint_url, config.bucket) == ("http://minio:9000", "onnx-reducer")
    assert config.secret_access_key == "a-real-secret"


def _resolved(env: dict[str, str]) -> dict[str, str]:
    """The compose file's ``${VAR:-default}`` / ``${VAR:?message}`` as compose fills them in with
    MINIO_ROOT_PASSWORD and POSTGRES_PASSWORD set and nothing else."""
    given = {"MINIO_ROOT_PASSWORD": "a-real-secret", "POSTGRES_PASSWORD": "another-real-secret"}

    def fill(match: re.Match[str]) -> str:
        name, op, rest = match.group(1), match.group(2), match.group(3)
        return given.get(name, rest if op == ":-" else "")

    return {key.lower(): re.sub(r"\$\{(\w+)(:[-?])([^}]*)\}", fill, value) for key, value in env.items()}


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

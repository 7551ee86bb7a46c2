"""docker-compose.yml, Dockerfile and Dockerfile.gpu (Docker does not run here): parsed and
linted, and their commands are exactly the ones the service tests run."""

from __future__ import annotations

import importlib
import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from api.settings import ApiSettings
from persistence.config import ServiceSettings
from reducer_cli.args import build_parser
from tests.service.commands import API_COMMAND, GPU_WORKER_COMMAND, MIGRATE_COMMAND, WORKER_COMMAND
from worker.settings import WorkerSettings

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


def instructions(path: Path) -> list[tuple[str, str]]:
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
    lines = instructions(ROOT / name)
    assert all(keyword in INSTRUCTIONS for keyword, _ in lines)
    bases = [rest for keyword, rest in lines if keyword == "FROM"]
    # two stages: a wheel built from the whole build context (pyproject.toml decides what ships),
    # then the image, which installs that wheel and copies nothing else of the project
    assert bases[0].endswith(" AS wheel") and bases[-1].startswith(base) and len(bases) == 2
    final = lines[[i for i, (keyword, _) in enumerate(lines) if keyword == "FROM"][-1] :]
    for keyword, rest in lines:
        if keyword == "RUN":
            subprocess.run(["bash", "-n", "-c", rest], check=True)
            assert "curl" not in rest and "| sh" not in rest
            assert "-e ." not in rest
        if keyword == "COPY" and not rest.startswith("--from="):
            for source in shlex.split(rest)[:-1]:
                assert (ROOT / source).exists(), source
    assert [rest for keyword, rest in final if keyword == "COPY"] == ["--from=wheel /wheels /wheels"]
    assert any(
        keyword == "RUN" and rest.startswith("pip install --no-cache-dir /wheels/*.whl") for keyword, rest in final
    )
    cmd = [json.loads(rest) for keyword, rest in lines if keyword == "CMD"]
    assert cmd == [command]
    assert ("USER", "reducer") in final


TOP_LEVEL = {"services", "volumes", "networks", "configs", "secrets", "name"}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
# what the images hold: the wheel's console script, its dependency celery and the interpreter
IMAGE_PROGRAMS = {"onnx-reducer", "celery", "python"}


def test_compose_validates(compose: dict[str, Any]) -> None:
    """What `docker compose config` checks (keys, references, interpolation) and more: the services
    built from the images run only what the images contain, with variables the settings know."""
    assert {key for key in compose if not key.startswith("x-")} <= TOP_LEVEL
    services, volumes = compose["services"], set(compose["volumes"])
    settings_fields = {name.upper() for name in (*ApiSettings.model_fields, *WorkerSettings.model_fields)}
    interpolated = set(re.findall(r"\$\{(\w+)", (ROOT / "docker-compose.yml").read_text()))
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    assert all(f"`{name}`" in deployment for name in interpolated), interpolated
    for name, service in services.items():
        assert ("image" in service) != ("build" in service), name
        for target, condition in service.get("depends_on", {}).items():
            assert target in services and condition["condition"] in CONDITIONS, (name, target)
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[target], target
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            assert source.startswith((".", "/")) or source in volumes, (name, mount)
        if "build" not in service:
            continue
        assert (ROOT / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
        command = service["command"]
        assert command[0] in IMAGE_PROGRAMS, command
        if command[0] == "celery":
            assert command[1:3] == ["-A", "worker.celery_app"]
            importlib.import_module("worker.celery_app")
        else:
            parser = build_parser()
            parser.parse_args(command[1:])
        assert set(service["environment"]) <= settings_fields, set(service["environment"]) - settings_fields
        probe = service.get("healthcheck", {}).get("test", [])
        if probe[:3] == ["CMD", "python", "-c"]:
            compile(probe[3], "healthcheck", "exec")


# What NVIDIA's TensorRT container release notes state for each tag this project has used, and the
# CUDA major onnxruntime-gpu wheels link (libcudart.so.N of libonnxruntime_providers_cuda.so, read
# from the wheels). A new base tag or pin must be added here, with its source, before the image uses it.
NGC_TENSORRT = {
    "25.01": {"CUDA": "12.8", "cuDNN": "9.7", "TensorRT": "10.8", "Python": "3.12"},
}
ONNXRUNTIME_GPU_CUDA = {"1.22.0": 12, "1.23.2": 12, "1.24.4": 12, "1.25.1": 12}


def _version_table() -> dict[str, str]:
    text = (ROOT / "docs" / "deployment.md").read_text()
    section = text.split("## GPU image versions", 1)[1]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2 and not set(cells[0]) <= {"-"}:
            rows[cells[0]] = cells[1]
    return rows


def test_gpu_image_matches_the_version_table() -> None:
    table = _version_table()
    lines = instructions(ROOT / "Dockerfile.gpu")
    base = [rest for keyword, rest in lines if keyword == "FROM"][-1]
    assert base == table["base image"]
    tag = re.fullmatch(r"nvcr\.io/nvidia/tensorrt:(\d\d\.\d\d)-py3", base)
    assert tag, base
    shipped = NGC_TENSORRT[tag.group(1)]
    for component in ("CUDA", "cuDNN", "TensorRT", "Python"):
        assert table[component] == shipped[component], component
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert Version(shipped["Python"]) in SpecifierSet(requires)
    run = " ".join(rest for keyword, rest in lines if keyword == "RUN")
    pins = dict(re.findall(r"\b(onnxruntime-gpu|polygraphy)==([\w.]+)", run))
    assert pins == {"onnxruntime-gpu": table["onnxruntime-gpu"], "polygraphy": table["polygraphy"]}
    assert ONNXRUNTIME_GPU_CUDA[pins["onnxruntime-gpu"]] == int(shipped["CUDA"].split(".")[0])
    # the CPU wheel is removed: both provide the `onnxruntime` module
    assert "pip uninstall --yes onnxruntime" in run
    assert run.index("pip uninstall --yes onnxruntime") < run.index("onnxruntime-gpu==")

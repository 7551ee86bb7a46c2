"""The images' install step, reproduced without a container daemon: the build context is the
project minus ``.dockerignore``, the first stage runs its own ``pip wheel`` line on exactly what its
``COPY`` lines bring in, and the wheel is installed (no dependencies: those come from this test's
environment through a plain path entry) into a fresh virtual environment. Every entry point the
images and docker-compose.yml run is then started from outside the source tree, where only the
installed wheel is importable."""

from __future__ import annotations

import fnmatch
import os
import shlex
import shutil
import site
import sqlite3
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.test_deploy_files import ROOT, instructions

DOCKERFILES = ("Dockerfile", "Dockerfile.gpu")


def _ignore_rules() -> list[tuple[bool, str]]:
    rules = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            rules.append((negated, line.lstrip("!").strip("/")))
    return rules


def _ignored(relative: str, rules: list[tuple[bool, str]]) -> bool:
    """``.dockerignore`` semantics for the patterns this project uses: a pattern matches a path or
    any of its parent folders, ``**/`` matches any depth, the last matching rule wins."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for negated, pattern in rules:
        candidates = [pattern]
        if pattern.startswith("**/"):
            candidates.append(pattern[3:])
        hit = any(fnmatch.fnmatchcase(prefix, p) for prefix in prefixes for p in candidates)
        if pattern.startswith("**/"):
            hit = hit or any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts)
        if hit:
            ignored = not negated
    return ignored


def build_context(destination: Path) -> None:
    """What ``docker build .`` sends: every file of the worktree that .dockerignore keeps."""
    rules = _ignore_rules()
    for folder, dirs, files in os.walk(ROOT):
        rel_folder = Path(folder).relative_to(ROOT).as_posix()
        rel_folder = "" if rel_folder == "." else rel_folder + "/"
        dirs[:] = [d for d in dirs if not _ignored(rel_folder + d, rules)]
        for name in files:
            if not _ignored(rel_folder + name, rules):
                target = destination / (rel_folder + name)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(Path(folder) / name, target)


def stages(dockerfile: str) -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions(ROOT / dockerfile):
        if keyword == "FROM":
            found.append([])
        found[-1].append((keyword, rest))
    return found


def root_packages() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(config["tool"]["importlinter"]["root_packages"])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first stage of Dockerfile, run here: its COPY lines on the build context, its RUN line."""
    base = tmp_path_factory.mktemp("image")
    context, src, wheels = base / "context", base / "src", base / "wheels"
    build_context(context)
    first = stages("Dockerfile")[0]
    assert first[0][1].endswith(" AS wheel")
    workdir = Path("/")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    for keyword, rest in first[1:]:
        if keyword == "WORKDIR":
            workdir = Path(rest)
        elif keyword == "COPY":
            *sources, target = shlex.split(rest)
            destination = src / (workdir / target).relative_to(workdir)
            for source in sources:
                origin = context / source
                if origin.is_dir():
                    shutil.copytree(origin, destination, dirs_exist_ok=True)
                else:
                    shutil.copy2(origin, destination / Path(source).name)
        elif keyword == "RUN":
            command = rest.replace("/wheels", str(wheels))
            subprocess.run(["bash", "-c", command], cwd=src, env=env, check=True, timeout=600, capture_output=True)
    built = list(wheels.glob("onnx_reducer-*.whl"))
    assert len(built) == 1, built
    return built[0]


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtual environment holding only the wheel; its dependencies are read from this test's
    site-packages through a plain path line (a .pth path entry runs none of that folder's .pth
    files, so the development checkout's editable install stays out)."""
    home = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True, timeout=120)
    python = home / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    for keyword, rest in stages("Dockerfile")[-1]:
        if keyword == "RUN" and "/wheels/" in rest:
            assert rest.startswith("pip install --no-cache-dir /wheels/*.whl")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
        # a PYTHONPATH naming a checkout would show its egg-info as installed: pip would skip the wheel
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    yield home


def _run(
    venv: Path, argv: list[str], cwd: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "DATABASE_URL", "REDIS_URL", "DATA_DIR"}}
    env.update({"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "ONNX_REDUCER_HOME": str(cwd / "home"), **(extra_env or {})})
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_wheel_ships_every_package_and_the_migrations(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    folders = {name.split("/")[0] for name in names if "/" in name}
    top = {folder for folder in folders if not folder.endswith((".dist-info", ".data"))}
    assert top == root_packages()
    assert "persistence/migrations/env.py" in names and "persistence/migrations/script.py.mako" in names
    versions = sorted(p.name for p in (ROOT / "persistence/migrations/versions").glob("*.py"))
    assert sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("persistence/migrations/versions/")) == versions
    assert "api/static/index.html" in names
    guides = {n.rsplit("/", 1)[1] for n in names if ".data/data/share/onnx-reducer/docs/" in n}
    assert guides == {"check-specs.md", "ci.md"}, "the guides the page links to (/guide/NAME) ship as data files"


def test_the_installed_app_serves_the_guides(venv: Path, tmp_path: Path) -> None:
    code = (
        "from api.guide import guide\n"
        "page = guide('check-specs')\n"
        "assert page.status_code == 200 and b'fail_if' in page.body, page.status_code\n"
        "print('ok')\n"
    )
    result = _run(venv, ["python", "-c", code], tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_every_installed_module_imports_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        f"roots = {sorted(root_packages())!r}\n"
        "for root in roots:\n"
        "    package = importlib.import_module(root)\n"
        "    assert package.__file__.startswith(sys.prefix), package.__file__\n"
        "    for info in pkgutil.walk_packages(package.__path__, root + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "print('ok')\n"
    )
    result = _run(venv, ["python", "-c", code], tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


@pytest.mark.parametrize(
    "argv",
    [
        ["onnx-reducer", "--help"],
        ["onnx-reducer", "serve", "--help"],
        ["onnx-reducer", "worker", "--help"],
        ["onnx-reducer", "db", "upgrade", "--help"],
        ["onnx-reducer", "token", "--help"],
        ["onnx-reducer", "reduce", "--help"],
        *(
            ["onnx-reducer", name, "--help"]
            for name in ("submit", "status", "download", "cancel", "retry", "delete", "jobs")
        ),
        ["python", "-m", "celery", "-A", "worker.celery_app", "worker", "--help"],
    ],
    ids=lambda argv: " ".join(argv[1:3]),
)
def test_every_image_entry_point_starts(venv: Path, tmp_path: Path, argv: list[str]) -> None:
    # the variables docker-compose.yml gives every service (nothing connects for --help)
    env = {"REDIS_URL": "redis://127.0.0.1:6379/0", "DATABASE_URL": f"sqlite:///{tmp_path / 'r.db'}", "DATA_DIR": "."}
    result = _run(venv, argv, tmp_path, env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "usage" in result.stdout.lower()


@pytest.mark.parametrize("command", ["status", "jobs", "download", "delete"])
def test_the_client_commands_run_from_the_wheel(venv: Path, tmp_path: Path, command: str) -> None:
    """Past --help: the client package is imported and the command reaches for the server (none
    listens on port 9 here: exit 8, server unreachable)."""
    argv = ["onnx-reducer", command, *([] if command == "jobs" else ["job-1"]), "--server", "http://127.0.0.1:9"]
    result = _run(venv, argv, tmp_path, {"ONNX_REDUCER_TOKEN": "t"})
    assert result.returncode == 8, (result.returncode, result.stderr[-3000:])
    assert "ModuleNotFoundError" not in result.stderr


def test_db_upgrade_runs_the_shipped_migrations(venv: Path, tmp_path: Path) -> None:
    database = tmp_path / "reducer.db"
    result = _run(venv, ["onnx-reducer", "db", "upgrade"], tmp_path, {"DATABASE_URL": f"sqlite:///{database}"})
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(database) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"jobs", "alembic_version"} <= tables

"""Checks of a service accuracy job vs the command line (issue 9, "one session, shared"): the
planted fp16 overflows of ``localize_bench.py`` (same models, spec and golden values), reduced as
a job of ``onnx-reducer serve`` (embedded: SQLite, in-process runner) and with
``onnx-reducer reduce --min-good`` (the service always stores min-good).

    python bench/service_localize_bench.py [--models chain rescnn ...] [--code DIR] [--label NAME]

``--code DIR`` serves another checkout of the project (e.g. ``git archive main`` unpacked in DIR)
to measure it with the same inputs: its api/worker run from DIR (``PYTHONPATH``), the command line
too. Results go to ``bench/out/service_localize-<label>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import onnx

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import localize_bench  # noqa: E402
import zoo  # noqa: E402

OUT = BENCH / "out"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(code: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DATA_DIR")}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return env


def _tool(*args: str, cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "reducer_cli.main", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


class Service:
    """``onnx-reducer serve`` on its embedded defaults in a temporary folder."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.tmp = tempfile.TemporaryDirectory(prefix="onnx-reducer-service-bench-")
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> httpx.Client:
        folder = Path(self.tmp.name)
        _tool("db", "upgrade", cwd=folder, env=self.env)
        command = [sys.executable, "-m", "reducer_cli.main", "serve", "--port", str(self.port)]
        with open(folder / "serve.log", "wb") as log:
            self.proc = subprocess.Popen(command, cwd=folder, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        for _ in range(150):
            try:
                if httpx.get(self.base + "/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        token = _tool("token", "create", "--team", "default", cwd=folder, env=self.env).stdout.strip()
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(20)
        self.tmp.cleanup()


def submit_planted(client: httpx.Client, folder: Path, golden: bool) -> str:
    """Submit the folder's planted model (with its golden values when ``golden``); the job's id."""
    files = {"model": ("planted.onnx", (folder / "planted.onnx").read_bytes())}
    if golden:
        files["golden"] = ("planted.golden", (folder / "planted.golden").read_bytes())
    response = client.post("/v1/jobs", files=files, data={"check_spec": localize_bench.SPEC})
    response.raise_for_status()
    return str(response.json()["id"])


def wait_for_end(
    client: httpx.Client, job_id: str, timeout: float, poll_s: float
) -> tuple[dict[str, Any], float] | None:
    """The job once it has ended and the seconds that took, or None past ``timeout``."""
    started = time.monotonic()
    while (job := client.get(f"/v1/jobs/{job_id}").json())["status"] not in ("succeeded", "failed", "cancelled"):
        if time.monotonic() - started > timeout:
            return None
        time.sleep(poll_s)
    return job, time.monotonic() - started


def service_run(client: httpx.Client, folder: Path, timeout: float) -> dict[str, Any]:
    job_id = submit_planted(client, folder, golden=True)
    ended = wait_for_end(client, job_id, timeout, poll_s=0.3)
    if ended is None:
        return {"status": "timeout"}
    job, wall = ended
    if job["status"] != "succeeded":
        return {"status": job["status"], "error": job.get("error")}
    iterations = client.get(f"/v1/jobs/{job_id}/iterations", params={"limit": 1000}).json()["items"]
    min_bad = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad")
    min_good = client.get(f"/v1/jobs/{job_id}/artifacts/min-good")
    return {
        "status": "ok",
        "checks": job["progress"]["checks_run"],
        "iterations": len(iterations),
        "phases": [it["phase"] for it in iterations],
        "final_nodes": [n.name for n in onnx.load_from_string(min_bad.content).graph.node],
        "min_good": min_good.status_code == 200,
        "wall_s": round(wall, 2),
    }


def cli_run(folder: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    run_dir = folder / "cli-min-good"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir()
    args = ["reduce", "../planted.onnx", "-o", "min_bad.onnx", "--min-good", "min_good.onnx"]
    args += ["--check-spec", "../spec.yaml", "--golden", "../planted.golden", "--summary-json", "summary.json", "-q"]
    started = time.monotonic()
    proc = _tool(*args, cwd=run_dir, env=env, timeout=timeout)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        return {"status": f"exit {proc.returncode}", "stderr": proc.stderr[-1000:]}
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "status": "ok",
        "checks": summary["checks_run"],
        "phases": [it["phase"] for it in summary["iterations"]],
        "final_nodes": summary["min_bad_nodes"],
        "min_good": (run_dir / "min_good.onnx").exists(),
        "wall_s": round(wall, 2),
    }


def markdown(rows: list[dict[str, Any]], label: str) -> str:
    lines = [
        f"| model ({label}) | nodes | service checks | service phases | service min-good | CLI checks "
        "| CLI min-good | final node (service) |",
        "|---|---:|---:|---|:---:|---:|:---:|---|",
    ]
    for row in rows:
        service, cli = row["service"], row["cli"]
        lines.append(
            f"| {row['model']} | {row['nodes']} | {service.get('checks', service['status'])} "
            f"| {' '.join(service.get('phases', [])[:6])}{' ...' if len(service.get('phases', [])) > 6 else ''} "
            f"| {'yes' if service.get('min_good') else 'no'} | {cli.get('checks', cli['status'])} "
            f"| {'yes' if cli.get('min_good') else 'no'} | `{'`, `'.join(service.get('final_nodes', []))}` |"
        )
    total = [r for r in rows if r["service"]["status"] == "ok" and r["cli"]["status"] == "ok"]
    if total:
        service_checks = sum(r["service"]["checks"] for r in total)
        cli_checks = sum(r["cli"]["checks"] for r in total)
        lines.append(f"| **total** ({len(total)}) | | **{service_checks}** | | | **{cli_checks}** | | |")
    return "\n".join(lines) + "\n"


def service_bench_args(
    description: str | None, default_models: list[str], argv: list[str] | None
) -> tuple[argparse.Namespace, dict[str, str]]:
    """--models, --code, --label and --timeout (what the benches that serve a checkout take), and the
    environment that serves --code."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=default_models, choices=zoo.ALL_MODELS)
    parser.add_argument("--code", type=Path, default=None, help="serve this checkout instead of this one")
    parser.add_argument("--label", default="this", help="names the output files")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    return args, _env(args.code.resolve() if args.code else None)


def write_results(bench: str, label: str, rows: list[dict[str, Any]], table: str) -> None:
    """out/BENCH-LABEL.json (the rows) and out/BENCH-LABEL.md (the table), and the table printed."""
    (OUT / f"{bench}-{label}.json").write_text(json.dumps(rows, indent=1))
    (OUT / f"{bench}-{label}.md").write_text(table)
    print(table)


def planted_folder(name: str, timeout: float) -> Path:
    """The zoo model's folder under out/service_localize, its fp16 overflow planted once."""
    folder = OUT / "service_localize" / name
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "planted.golden").exists():
        (folder / "plant.json").write_text(json.dumps(localize_bench.prepare(name, folder, timeout)))
    return folder


def main(argv: list[str] | None = None) -> int:
    args, env = service_bench_args(__doc__, list(localize_bench.DEFAULT_MODELS), argv)
    rows = []
    with Service(env) as client:
        for name in args.models:
            folder = planted_folder(name, args.timeout)
            (folder / "spec.yaml").write_text(localize_bench.SPEC)
            row = json.loads((folder / "plant.json").read_text())
            row["service"] = service_run(client, folder, args.timeout)
            row["cli"] = cli_run(folder, env, args.timeout)
            print(f"{name}: service {row['service']} | cli {row['cli']}", flush=True)
            rows.append(row)
    write_results("service_localize", args.label, rows, markdown(rows, args.label))
    return 0


if __name__ == "__main__":
    sys.exit(main())

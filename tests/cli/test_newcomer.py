"""What a new user trips on at the command line (issue 20): the version, one meaning per exit code,
read-only places, the token hint and the phase legend."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from examples.build_example_model import build_example_model
from reducer_cli.args import EXIT_INVALID_MODEL, EXIT_USAGE
from reducer_cli.client_output import EventLog
from reducer_cli.main import run
from reducer_cli.phases import PHASES
from reducer_cli.progress import ProgressReporter
from reducer_client import Event
from reducer_core.candidate import Candidate
from reducer_core.flakiness import FailureRate, FlakinessReport, Status
from reducer_core.records import IterationRecord
from reducer_core.verdict import Verdict, VerdictKind


def test_version_names_the_package_and_its_runtimes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run(["--version"])
    assert exited.value.code == 0
    assert re.fullmatch(r"onnx-reducer \d+\.\d+\.\d+\S* \(onnx \S+, onnxruntime \S+\)\n", capsys.readouterr().out)


MISSING = "Model file 'missing.onnx' does not exist. Check the path (a relative path starts from the current folder)."


@pytest.mark.parametrize(
    "argv",
    [
        ["reduce", "missing.onnx", "-o", "r.onnx", "--check", "true"],
        ["precision", "missing.onnx", "-o", "r.onnx", "--check-spec", "spec.yaml"],
        ["golden", "missing.onnx", "-o", "golden.zip"],
        ["inspect", "missing.onnx"],
        ["submit", "missing.onnx", "--check-spec", "spec.yaml", "--server", "http://127.0.0.1:9", "--token", "t"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_missing_model_is_bad_usage_with_one_wording_for_every_command(
    in_tmp: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    Path("spec.yaml").write_text("kind: error\n")
    assert run(argv) == EXIT_USAGE
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"[E] {MISSING}"


def test_an_unreadable_model_is_exit_4_for_golden_as_for_reduce(in_tmp: Path) -> None:
    Path("garbage.onnx").write_bytes(b"not a model")
    assert run(["golden", "garbage.onnx", "-o", "golden.zip"]) == EXIT_INVALID_MODEL
    assert run(["reduce", "garbage.onnx", "-o", "r.onnx", "--check", "true", "--no-progress"]) == EXIT_INVALID_MODEL


def test_serve_help_names_the_home_folder_as_readme_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run(["--help"])
    overview = " ".join(capsys.readouterr().out.split())
    assert "ONNX_REDUCER_HOME" in overview and "SQLite, ./data" not in overview
    with pytest.raises(SystemExit):
        run(["serve", "--help"])
    serve = " ".join(capsys.readouterr().out.split())
    assert "~/.local/share/onnx-reducer" in serve and "token create" in serve


def _run_with_read_only(folder: Path, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``onnx-reducer ARGV`` while ``folder`` cannot be written: its mode for a user, a read-only bind
    mount in a private mount namespace for root (whom file modes do not stop)."""
    command = [sys.executable, "-m", "reducer_cli.main", *argv]
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
        finally:
            folder.chmod(0o755)
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], check=False).returncode != 0:
        pytest.skip("root without mount namespaces: no way to make a folder read-only here")
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(folder), *command],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def _example(folder: Path) -> Path:
    folder.mkdir()
    onnx.save(build_example_model(), folder / "model.onnx")
    return folder / "model.onnx"


CHECK = ["--no-progress", "--fail-regex", "Op: Mul", "--check", sys.executable, "-m", "reducer_cli.main", "inspect"]


def test_a_read_only_working_folder_is_one_line_before_any_check(tmp_path: Path) -> None:
    model = _example(tmp_path / "ro")
    out = tmp_path / "out"
    out.mkdir()
    argv = ["reduce", "model.onnx", "-o", str(out / "r.onnx"), *CHECK, "polygraphy_debug.onnx"]
    done = _run_with_read_only(model.parent, argv, model.parent)
    assert done.returncode == EXIT_USAGE, done.stderr
    (line,) = done.stderr.splitlines()  # one line: "Read-only file system" as root, "Permission denied" else
    assert line.startswith(f"[E] Cannot write in the working folder '{model.parent}' (")
    assert line.endswith(
        "): the model each check reads (--iter-artifact) and the replay are written there. Run from a "
        "writable folder, or point --iter-artifact and --save-debug-replay at one."
    )
    assert "Traceback" not in done.stderr and "iteration" not in done.stderr
    assert sorted(p.name for p in model.parent.iterdir()) == ["model.onnx"] and not list(out.iterdir())


def test_output_into_a_read_only_folder_is_refused_before_the_reduction(tmp_path: Path) -> None:
    model = _example(tmp_path / "work")
    read_only = tmp_path / "ro"
    read_only.mkdir()
    argv = ["reduce", "model.onnx", "-o", str(read_only / "r.onnx"), *CHECK, "polygraphy_debug.onnx"]
    done = _run_with_read_only(read_only, argv, model.parent)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(
        f"[E] Cannot write -o/--output '{read_only / 'r.onnx'}': the folder '{read_only}' is not writable ("
    )
    assert "iteration" not in done.stdout + done.stderr  # no check ran
    assert sorted(p.name for p in model.parent.iterdir()) == ["model.onnx"]  # no replay left behind


def _record(number: int, phase: str, size: int, cached: bool, reproduces: bool = False) -> IterationRecord:
    kind = VerdictKind.FAIL if reproduces else VerdictKind.PASS
    return IterationRecord(number, phase, Candidate(frozenset(range(size))), Verdict(kind), reproduces, cached, 3)


def test_cached_verdicts_in_a_row_are_one_line() -> None:
    stream = io.StringIO()
    log = ProgressReporter(stream=stream, live=False)
    log.iteration(_record(72, "1-minimal", 4, cached=False))
    for size in (3, 5, 9, 9, 4):
        log.iteration(_record(72, "1-minimal", size, cached=True, reproduces=size == 4))
    log.iteration(_record(73, "1-minimal", 2, cached=False))
    log.iteration(_record(73, "1-minimal", 2, cached=True))
    log.info("done")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 6, lines
    assert "candidate      4 nodes" in lines[0] and "check" in lines[0]
    assert "candidate      3 nodes" in lines[1] and lines[1].rstrip().endswith("best 3") and "cached" in lines[1]
    assert lines[2] == (
        "[I] iteration   72 | 1-minimal       | 4 more candidates of 4-9 nodes answered from the cache "
        "(1 reproduce the failure) | best 3"
    )
    assert "iteration   73" in lines[3] and "cached" not in lines[3]
    assert "iteration   73" in lines[4] and "cached" in lines[4]  # one cached verdict keeps its own line
    assert lines[-1] == "[I] done" and len([line for line in lines if "72" in line]) == 3


def test_the_phases_are_explained_in_help_and_on_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run(["reduce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, meaning in PHASES.items():
        assert f"{name}: {meaning}" in text
    static = Path(__file__).resolve().parents[2] / "api" / "static"
    for lang in ("en", "zh-CN"):
        catalogue = json.loads((static / "i18n" / f"{lang}.json").read_text(encoding="utf-8"))
        assert {key.removeprefix("phase.") for key in catalogue if key.startswith("phase.")} == set(PHASES)
    assert all(f'<dd data-i18n="phase.{name}">' in (static / "index.html").read_text() for name in PHASES)


def test_repeatable_verdicts_are_worded_calmly() -> None:
    report = FlakinessReport(Status.REPEATABLE, FailureRate(4, 4), evidence=(), repeats=1, rechecks=4)
    message = report.message()
    assert message.startswith("the check is deterministic:") and "goes on as usual" in message
    assert "not flaky" not in message and "not monotone" not in message


def test_submit_wait_counts_cached_verdicts_in_a_row_on_one_line() -> None:
    lines: list[str] = []
    events = EventLog(lines.append)

    def iteration(seq: int, number: int, nodes: int, cached: str | None) -> Event:
        data = {"number": number, "phase": "1-minimal", "nodes": nodes, "verdict": "pass", "best_size": 3}
        return Event(seq, "iteration", data | ({"cached": cached} if cached else {"duration_s": 0.5}))

    events(iteration(1, 9, 4, None))
    for seq, nodes in enumerate((3, 5, 6, 5), start=2):
        events(iteration(seq, 9, nodes, "job"))
    events.flush()
    events.flush()  # nothing more to say
    assert len(lines) == 3, lines
    assert "cached (job)" in lines[1]
    assert lines[2] == (
        "[I] iteration    9 | 1-minimal       | 3 more candidates of 5-6 nodes answered from the cache | best 3"
    )


def test_a_file_error_mid_run_is_one_line(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx.save(build_example_model(), "model.onnx")
    argv = ["reduce", "model.onnx", "-o", "r.onnx", "--load-debug-replay", "gone.json", *CHECK, "polygraphy_debug.onnx"]
    assert run(argv) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == "[E] No such file or directory 'gone.json'."
    assert "Traceback" not in err

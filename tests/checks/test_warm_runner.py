"""Warm check runners (``checks.warm``, issue 31): spec checks forked by a server that imported the
runtimes once, each in a process of its own with its own folder, time limit, memory limit and
kill; what one check does never reaches the next, and the answers are those of cold children."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
import pytest

from checks import warm
from checks.cancel import CheckStoppedError, stop_checks_when
from checks.isolated import IsolatedSpecCheck, run_isolated
from checks.slots import for_slot
from checks.spec import parse_check_spec
from reducer_core.verdict import MEMORY_LIMIT_SIGNATURE, Verdict, VerdictKind
from tests.checks.conftest import COMPARE_FP16, OP_PRESENT_MUL, ROOT, cli
from tests.checks.models import matmul_overflow_model
from tests.checks.processes import running, thread_count
from tests.service.helpers import chain_model
from worker.checking import job_check

MiB = 2**20
HELPERS = "tests.checks.warm_helpers"
SPEC = parse_check_spec("kind: op-present\nops: [Mul]\ntimeout: 60")


@pytest.fixture(autouse=True)
def fresh_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no runner (the pool is this process's) and warm runners on."""
    monkeypatch.delenv(warm.WARM_ENV, raising=False)
    warm.POOL.close_all()
    yield
    warm.POOL.close_all()


def run_entry(entry: str, timeout_s: float = 60, memory_limit: int | None = None, **extra: Any) -> Verdict:
    payload = {"entry": f"{HELPERS}:{entry}", **extra}
    verdict, _ = run_isolated(payload, timeout_s, memory_limit, warm=True)
    return verdict


def whoami() -> tuple[int, int, str, int]:
    """(pid, parent pid, working folder, numpy draw) of a check that passed."""
    verdict = run_entry("whoami")
    assert verdict.kind is VerdictKind.PASS, verdict
    pid, parent, cwd, draw = verdict.detail.split()
    return int(pid), int(parent), cwd, int(draw)


def is_warm_server(pid: int) -> bool:
    return b"checks.warm_server" in Path(f"/proc/{pid}/cmdline").read_bytes()


def alive(pid: int) -> bool:
    """Whether ``pid`` has not ended for good: a killed runner's main thread is a zombie while the
    native thread of the onnxruntime import still exits, and until that one is gone its parent
    cannot reap it (``Popen.poll`` says it runs)."""
    return thread_count(pid) > 1 or running(pid)


def wait_until(condition: Any, within_s: float = 60.0) -> bool:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_each_check_is_a_fresh_child_of_one_warm_runner() -> None:
    first, second = whoami(), whoami()
    assert first[0] != second[0]  # a process per check
    assert first[1] == second[1] != os.getpid()  # forked by the same runner, not by this process
    assert is_warm_server(first[1])
    assert first[2] != second[2]  # a private folder per check (gone once it ended)
    assert not Path(first[2]).exists()
    assert first[3] != second[3]  # reseeded as a fresh interpreter: not the random state of the fork


def test_a_segfault_neither_takes_down_the_runner_nor_changes_the_next_verdict() -> None:
    runner = whoami()[1]
    verdict, _ = IsolatedSpecCheck(SPEC, entry="tests.checks.helpers:segfault").run(Path("unused.onnx"))
    assert verdict.kind is VerdictKind.CRASH
    assert verdict.signature == "signal=SIGSEGV"
    assert whoami()[1] == runner


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="the memory limit needs /proc")
def test_a_check_past_its_memory_limit_is_killed_and_the_runner_goes_on() -> None:
    runner = whoami()[1]
    verdict = run_entry("hog", memory_limit=150 * MiB, megabytes=400)
    assert verdict.kind is VerdictKind.CRASH, verdict
    assert verdict.signature == MEMORY_LIMIT_SIGNATURE
    assert whoami()[1] == runner
    assert alive(runner)


def test_a_hanging_check_times_out_and_the_runner_goes_on() -> None:
    runner = whoami()[1]
    verdict, _ = IsolatedSpecCheck(
        parse_check_spec("kind: op-present\nops: [Mul]\ntimeout: 1.5"), entry="tests.checks.helpers:hang"
    ).run(Path("unused.onnx"))
    assert verdict.kind is VerdictKind.TIMEOUT
    assert whoami()[1] == runner


def test_what_a_failing_check_changed_is_not_seen_by_the_next() -> None:
    assert run_entry("leave_garbage").kind is VerdictKind.FAIL
    verdict = run_entry("sees_garbage")
    assert verdict.kind is VerdictKind.PASS, verdict.detail


def test_the_output_of_a_warm_check_is_captured_to_its_end() -> None:
    verdict, output = run_isolated({"entry": "tests.checks.helpers:chatty", "megabytes": 2}, 60, warm=True)
    assert verdict.kind is VerdictKind.PASS
    assert output.rstrip().endswith("the very last line")


def test_a_warm_child_sees_the_environment_a_cold_one_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    payload = {"entry": "tests.checks.helpers:environment"}
    _, warm_names = run_isolated(payload, 60, extra_env={"CUDA_VISIBLE_DEVICES": "3"}, warm=True)
    monkeypatch.setenv(warm.WARM_ENV, "0")
    _, cold_names = run_isolated(payload, 60, extra_env={"CUDA_VISIBLE_DEVICES": "3"}, warm=True)
    assert warm_names.split() == cold_names.split()
    assert "CUDA_VISIBLE_DEVICES" in warm_names.split()


def test_warm_runners_off_runs_cold_children(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(warm.WARM_ENV, "0")
    assert whoami()[1] == os.getpid()
    assert warm.POOL.idle_count == 0


def test_a_stopped_check_closes_its_runner_and_the_next_check_gets_a_new_one(tmp_path: Path) -> None:
    runner = whoami()[1]
    started = tmp_path / "started"
    with stop_checks_when(lambda: started.exists() or bool(started.touch())), pytest.raises(CheckStoppedError):
        run_entry("hog", megabytes=1)
    assert wait_until(lambda: not alive(runner))
    _, parent, _, _ = whoami()
    assert parent != runner and is_warm_server(parent)


def test_a_runner_that_died_between_checks_is_replaced() -> None:
    runner = whoami()[1]
    os.kill(runner, signal.SIGKILL)
    assert wait_until(lambda: not alive(runner))
    _, parent, _, _ = whoami()
    assert parent != runner and is_warm_server(parent)  # a fresh runner, not a cold child


def test_checks_at_once_get_a_warm_runner_each(tmp_path: Path) -> None:
    verdicts: list[Verdict] = []

    def one() -> None:
        verdicts.append(run_entry("meet", folder=str(tmp_path), count=3))

    threads = [threading.Thread(target=one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [v.kind for v in verdicts] == [VerdictKind.PASS] * 3
    parents = {int(v.detail) for v in verdicts}
    assert len(parents) == 3 and all(is_warm_server(p) for p in parents)
    assert warm.POOL.idle_count == 3


CALLER = """
import sys
from checks.isolated import run_isolated
run_isolated({"entry": "tests.checks.warm_helpers:meet", "folder": sys.argv[1], "count": 2}, 120, warm=True)
"""


def test_a_runner_and_its_check_end_when_the_caller_is_killed(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    caller = subprocess.Popen([sys.executable, "-c", CALLER, str(tmp_path)], env=env, cwd=tmp_path)
    try:
        assert wait_until(lambda: any(tmp_path.glob("*.parent")))
        marker = next(tmp_path.glob("*.parent"))
        check, runner = int(marker.stem), int(marker.read_text())
        assert is_warm_server(runner)
    finally:
        caller.kill()
        caller.wait()
    assert wait_until(lambda: not alive(check) and not alive(runner))


def _summary(tmp_path: Path, name: str, *options: str) -> tuple[dict[str, Any], bytes]:
    args = ["reduce", "model.onnx", "-o", f"{name}.onnx", "--check-spec", "spec.yaml"]
    proc = cli(*args, "--summary-json", f"{name}.json", "--no-progress", *options, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads((tmp_path / f"{name}.json").read_text()), (tmp_path / f"{name}.onnx").read_bytes()


@pytest.mark.parametrize(
    ("spec", "model", "options"),
    [
        (OP_PRESENT_MUL, "chain", ("--mode", "linear")),
        (OP_PRESENT_MUL, "chain", ()),
        (COMPARE_FP16, "overflow", ("--no-localize",)),
        (OP_PRESENT_MUL, "chain", ("--jobs", "2")),
    ],
    ids=["op-present-linear", "op-present-auto", "compare", "op-present-2-slots"],
)
def test_an_answer_and_its_check_count_are_the_same_warm_and_cold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, model: str, options: tuple[str, ...]
) -> None:
    onnx.save(chain_model(12, mul_at=8) if model == "chain" else matmul_overflow_model(), str(tmp_path / "model.onnx"))
    (tmp_path / "spec.yaml").write_text(spec)
    warm_summary, warm_model = _summary(tmp_path, "warm", *options)
    monkeypatch.setenv(warm.WARM_ENV, "0")
    cold_summary, cold_model = _summary(tmp_path, "cold", *options)
    assert warm_model == cold_model
    # with several slots the speculative checks depend on which check ends first: the answer is
    # compared there, the count only with one slot
    counted = ("checks_run", "cache_hits") if "--jobs" not in options else ()
    for key in ("min_bad_nodes", "min_good_nodes", "nodes_after", *counted):
        assert warm_summary[key] == cold_summary[key], key
    assert warm_summary["checks_run"] > 1


def test_a_service_worker_check_and_a_slot_check_run_warm(tmp_path: Path) -> None:
    """The worker's check (Celery and the embedded slots: ``worker.checking.job_check``) and a
    ``--jobs`` slot's check (``checks.slots.for_slot``) are forked by warm runners, one per
    environment (a slot's device is part of it)."""
    model = tmp_path / "model.onnx"
    model.write_bytes(chain_model(5, mul_at=2).SerializeToString())
    spec = parse_check_spec(OP_PRESENT_MUL)
    worker_check = job_check(spec, tmp_path, allow_command=False, memory_limit_bytes=2**30)
    assert worker_check.run(model)[0].kind is VerdictKind.FAIL
    assert warm.POOL.idle_count == 1
    slot_check = for_slot(worker_check, None, {"CUDA_VISIBLE_DEVICES": "1"})
    assert slot_check.run(model)[0].kind is VerdictKind.FAIL
    assert warm.POOL.idle_count == 2

"""Reference values reused between checks (``checks.reference_cache``, issue 31): the same
candidate with the same inputs reads what its first reference run stored, and the verdict is the
one a cold run without reuse gives."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from checks import reference_cache, warm
from checks.build import build_check
from checks.lifeline import owner_mark
from checks.runtimes.onnxruntime import OrtRunner
from checks.spec import RuntimeSpec, parse_check_spec
from tests.checks.conftest import COMPARE_FP16, ROOT
from tests.checks.models import chain_model

CPU = RuntimeSpec()


@pytest.fixture(autouse=True)
def warm_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(warm.WARM_ENV, raising=False)
    yield
    warm.POOL.close_all()


def stored_entries() -> list[Path]:
    return sorted(Path(warm.REUSE.path()).glob("*.npz"))


def test_a_repeated_compare_check_reuses_its_reference_and_answers_as_a_cold_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "model.onnx"
    onnx.save(chain_model(22, 11), str(model))
    check = build_check(parse_check_spec(COMPARE_FP16 + "repeat: 3\n"))
    before = set(stored_entries())
    warm_verdict, _ = check.run(model)
    assert len(set(stored_entries()) - before) == 1  # three runs, one reference run stored
    monkeypatch.setenv(warm.WARM_ENV, "0")  # cold children, nothing reused
    cold_verdict, _ = check.run(model)
    assert (warm_verdict.kind, warm_verdict.signature, warm_verdict.detail) == (
        cold_verdict.kind,
        cold_verdict.signature,
        cold_verdict.detail,
    )
    assert warm_verdict.signature == "mismatch:nonfinite"


def _runner_values(
    model: onnx.ModelProto, folder: Path, feeds: dict[str, np.ndarray], runs: list[int]
) -> dict[str, np.ndarray]:
    def run() -> dict[str, np.ndarray]:
        runs.append(1)
        return dict(OrtRunner(CPU, model, folder).run(feeds))

    return dict(reference_cache.reference_values(str(folder), CPU, model, feeds, run))


def test_the_same_model_and_inputs_read_the_stored_values_bit_for_bit(tmp_path: Path) -> None:
    model = chain_model(6, 3)
    feeds = {"x": np.random.default_rng(0).random((1, 16), dtype=np.float32)}
    runs: list[int] = []
    first = _runner_values(model, tmp_path, feeds, runs)
    again = _runner_values(model, tmp_path, feeds, runs)
    assert len(runs) == 1
    assert first.keys() == again.keys()
    for name, value in first.items():
        assert again[name].dtype == value.dtype and np.array_equal(again[name], value)


def test_other_inputs_weights_or_runtime_run_the_reference_again(tmp_path: Path) -> None:
    model = chain_model(6, 3)
    feeds = {"x": np.ones((1, 16), dtype=np.float32)}
    runs: list[int] = []
    _runner_values(model, tmp_path, feeds, runs)
    _runner_values(model, tmp_path, {"x": np.full((1, 16), 2.0, dtype=np.float32)}, runs)
    other = onnx.ModelProto()
    other.CopyFrom(model)
    first = other.graph.initializer[0]
    first.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(first) * 2, first.name))
    _runner_values(other, tmp_path, feeds, runs)
    assert len(runs) == 3
    optimized = RuntimeSpec(optimization="disable")
    assert reference_cache.cache_key(optimized, model, feeds) != reference_cache.cache_key(CPU, model, feeds)


def test_any_tensor_name_round_trips(tmp_path: Path) -> None:
    values = {"file": np.arange(3, dtype=np.int64), "a/b:0": np.ones((2, 2), dtype=np.float16)}
    reference_cache.store(tmp_path, "k", values)
    found = reference_cache.load(tmp_path, "k")
    assert found is not None and list(found) == ["file", "a/b:0"]
    assert all(np.array_equal(found[n], v) and found[n].dtype == v.dtype for n, v in values.items())


def test_an_entry_removed_by_a_check_at_the_same_time_does_not_fail_the_next_store(tmp_path: Path) -> None:
    """Checks at once keep the folder to ``MAX_ENTRIES`` together: an entry listed by one and
    removed by another before its ``stat`` (here: a link to nothing) is skipped, not an error."""
    (tmp_path / "gone.npz").symlink_to(tmp_path / "removed-meanwhile.npz")
    reference_cache.store(tmp_path, "k", {"y": np.ones(2, dtype=np.float32)})
    assert reference_cache.load(tmp_path, "k") is not None


def test_the_reuse_folders_of_processes_that_are_gone_are_removed(tmp_path: Path) -> None:
    """A process that did not run its ``atexit`` (a Celery pool process, a killed one) leaves its
    reuse folder; the next process that makes one removes it, and keeps those of running ones."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    gone = tmp_path / f"{warm.REUSE_PREFIX}{int(ended.stdout)}_1-abc"
    mark = owner_mark(os.getpid())
    assert mark is not None
    running = tmp_path / f"{warm.REUSE_PREFIX}{mark.replace(':', '_')}-def"
    for folder in (gone, running):
        folder.mkdir()
        (folder / "0.npz").write_bytes(b"x")
    made = subprocess.run(
        [sys.executable, "-c", "from checks.warm import reuse_folder; print(reuse_folder())"],
        env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(made.stdout.strip()).parent == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == [running.name]  # and its own removed at exit


def test_the_folder_keeps_the_newest_entries_within_its_byte_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process's folder holds at most ``MAX_TOTAL_BYTES`` (``MAX_ENTRIES`` of the largest values
    would be gigabytes in the temporary folder): the oldest entries go first."""
    monkeypatch.setattr(reference_cache, "MAX_TOTAL_BYTES", 3 * 2**20)
    for key in ("first", "second", "third"):
        reference_cache.store(tmp_path, key, {"y": np.zeros(2**18, dtype=np.float32)})  # 1 MiB each
    assert reference_cache.load(tmp_path, "first") is None
    assert reference_cache.load(tmp_path, "second") is not None and reference_cache.load(tmp_path, "third") is not None

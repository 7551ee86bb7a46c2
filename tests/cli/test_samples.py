"""Every input sample counts on the command line (issue 22): several --load-inputs files are
several samples, in order, for ``golden``, ``reduce`` and ``precision``; a compare spec judges the
user's samples (not generated ones), every one, with ``fail_if`` deciding; the log and
--summary-json name the failing samples; a file that does not fit the model is one line and exit 2.

The model: a 30-node chain whose Mul (``n15_overflow``) overflows fp16 only for large inputs, so
``big.npz`` fails a compare fp32-vs-fp16 spec and ``small.npz`` passes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from polygraphy.json import save_json

from bench.samples_bench import input_overflow_chain
from checks.golden import GoldenStore
from tests.checks.conftest import cli

SPEC = """\
kind: compare
reference: {runtime: onnxruntime}
target: {runtime: onnxruntime, precision: fp16}
tolerance: {atol: 0.01, rtol: 0.01}
"""
BIG = np.full((1, 8), 100.0, np.float32)  # x1000 is beyond fp16's 65504
SMALL = np.full((1, 8), 0.5, np.float32)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    onnx.save(input_overflow_chain(), str(tmp_path / "model.onnx"))
    np.savez(tmp_path / "big.npz", x=BIG)
    np.savez(tmp_path / "small.npz", x=SMALL)
    (tmp_path / "spec.yaml").write_text(SPEC)
    return tmp_path


def _reduce(folder: Path, *extra: str) -> tuple[int, str, dict[str, object] | None]:
    summary = folder / "summary.json"
    summary.unlink(missing_ok=True)
    proc = cli(
        "reduce", "model.onnx", "-o", "min_bad.onnx", "--check-spec", "spec.yaml", "--summary-json", "summary.json",
        "--no-progress", *extra, cwd=folder,
    )  # fmt: skip
    data = json.loads(summary.read_text()) if summary.exists() else None
    return proc.returncode, proc.stdout + proc.stderr, data


def test_golden_keeps_every_file_as_a_sample_in_order(folder: Path) -> None:
    proc = cli("golden", "model.onnx", "-o", "g.golden", "--load-inputs", "big.npz", "small.npz", cwd=folder)

    assert proc.returncode == 0, proc.stderr
    assert "for 2 sample(s)" in proc.stdout + proc.stderr
    store = GoldenStore.open(folder / "g.golden")
    assert store.samples == 2
    np.testing.assert_array_equal(store.read(0, "x"), BIG)
    np.testing.assert_array_equal(store.read(1, "x"), SMALL)


def test_golden_from_several_files_feeds_a_reduction_that_finds_the_mul(folder: Path) -> None:
    made = cli("golden", "model.onnx", "-o", "g.golden", "--load-inputs", "big.npz", "small.npz", cwd=folder)
    assert made.returncode == 0, made.stderr

    code, log, summary = _reduce(folder, "--golden", "g.golden")

    assert code == 0, log
    assert summary is not None and summary["min_bad_nodes"] == ["Mul:n15_overflow"]
    assert summary["samples"] == {"original": {"judged": 2, "failing": [0]}, "min_bad": {"judged": 2, "failing": [0]}}


def test_a_spec_judges_the_loaded_samples_and_names_the_failing_one(folder: Path) -> None:
    code, log, summary = _reduce(folder, "--load-inputs", "small.npz", "big.npz", "small.npz")

    assert code == 0, log
    assert summary is not None and summary["min_bad_nodes"] == ["Mul:n15_overflow"]
    assert summary["samples"] == {"original": {"judged": 3, "failing": [1]}, "min_bad": {"judged": 3, "failing": [1]}}
    assert "judges 3 sample(s) from --load-inputs" in log
    assert "samples judged: 3; original model: sample(s) 1 of 3 fail" in log
    assert "minimal model (1 nodes): sample(s) 1 of 3 fail" in log
    original = summary["original"]
    assert isinstance(original, dict) and str(original["detail"]).startswith("samples failing: [1] of 3 judged")


def test_the_loaded_sample_is_judged_not_generated_inputs(folder: Path) -> None:
    """small.npz passes: the run ends 'did not fail' because of the user's sample; big.npz fails
    although the spec's own generated inputs ([0, 1]) would pass."""
    code, log, _ = _reduce(folder, "--load-inputs", "small.npz")
    assert code == 3, log
    code, log, summary = _reduce(folder, "--load-inputs", "big.npz")
    assert code == 0, log
    assert summary is not None and summary["samples"]["original"] == {"judged": 1, "failing": [0]}  # type: ignore[index]


def test_fail_if_all_needs_every_sample_to_fail(folder: Path) -> None:
    (folder / "spec.yaml").write_text(SPEC + "fail_if: all\n")

    code, log, _ = _reduce(folder, "--load-inputs", "big.npz", "small.npz")
    assert code == 3, log
    assert "fail_if=all needs 2 failing" in log

    code, log, summary = _reduce(folder, "--load-inputs", "big.npz", "big.npz")
    assert code == 0, log
    assert summary is not None and summary["samples"]["original"] == {"judged": 2, "failing": [0, 1]}  # type: ignore[index]


def test_a_stacked_input_file_is_one_line_and_exit_2_before_any_check(folder: Path) -> None:
    np.savez(folder / "stacked.npz", x=np.stack([BIG, SMALL]))

    for command in (
        ["golden", "model.onnx", "-o", "g.golden", "--load-inputs", "stacked.npz"],
        [
            "reduce",
            "model.onnx",
            "-o",
            "m.onnx",
            "--check-spec",
            "spec.yaml",
            "--load-inputs",
            "big.npz",
            "stacked.npz",
        ],
    ):
        proc = cli(*command, cwd=folder)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("[E]")]
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and "onnxruntime" not in proc.stderr.lower()
        assert len(errors) == 1, proc.stderr
        assert "Input 'x'" in errors[0] and "stacked.npz" in errors[0]
        assert "float32 [1, 8]" in errors[0] and "float32 [2, 1, 8]" in errors[0]
    assert not (folder / "polygraphy_debug.onnx").exists()


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--golden", "g.golden", "--load-inputs", "big.npz"], "--load-inputs and --golden both give"),
        (["--load-inputs", "big.npz", "small.npz", "--check", "true"], "gives 2 samples"),
    ],
)
def test_a_combination_that_cannot_be_honoured_is_refused_in_one_line(
    folder: Path, extra: list[str], words: str
) -> None:
    cli("golden", "model.onnx", "-o", "g.golden", cwd=folder)
    args = ["reduce", "model.onnx", "-o", "m.onnx"]
    if "--check" not in extra:
        args += ["--check-spec", "spec.yaml"]
    proc = cli(*args, *extra, cwd=folder)

    errors = [line for line in proc.stderr.splitlines() if line.startswith("[E]")]
    assert proc.returncode == 2, proc.stderr
    assert len(errors) == 1 and words in errors[0], proc.stderr


def test_precision_judges_every_loaded_sample(folder: Path) -> None:
    proc = cli(
        "precision", "model.onnx", "-o", "mixed.onnx", "--check-spec", "spec.yaml", "--summary-json", "p.json",
        "--load-inputs", "small.npz", "big.npz", "small.npz", cwd=folder,
    )  # fmt: skip

    assert proc.returncode == 0, proc.stderr
    summary = json.loads((folder / "p.json").read_text())
    assert "n15_overflow" in summary["keep_fp32"]
    assert summary["samples"] == {"original": {"judged": 3, "failing": [1]}, "min_bad": {"judged": 3, "failing": []}}

    alone = cli(
        "precision", "model.onnx", "-o", "mixed.onnx", "--check-spec", "spec.yaml", "--load-inputs", "small.npz",
        cwd=folder,
    )  # fmt: skip
    assert alone.returncode == 0 and "already passes" in alone.stderr + alone.stdout


def test_a_data_loader_scripts_feed_dicts_are_the_specs_samples(folder: Path) -> None:
    (folder / "loader.py").write_text(
        "import numpy as np\n\n"
        "def load_data():\n"
        "    for value in (0.5, 100.0):\n"
        "        yield {'x': np.full((1, 8), value, np.float32)}\n"
    )
    code, log, summary = _reduce(folder, "--data-loader-script", "loader.py")

    assert code == 0, log
    assert "judges 2 sample(s) from --data-loader-script" in log
    assert summary is not None and summary["samples"]["original"] == {"judged": 2, "failing": [1]}  # type: ignore[index]


def test_val_range_with_a_spec_is_refused_instead_of_ignored(folder: Path) -> None:
    code, log, _ = _reduce(folder, "--val-range", "[90,100]")
    errors = [line for line in log.splitlines() if line.startswith("[E]")]
    assert code == 2 and len(errors) == 1 and "input_range" in errors[0], log


def test_a_golden_file_whose_input_does_not_fit_is_one_line_and_exit_2(folder: Path) -> None:
    save_json([{"x": np.stack([BIG, SMALL])}], str(folder / "stacked.json"))
    code, log, _ = _reduce(folder, "--golden", "stacked.json")
    errors = [line for line in log.splitlines() if line.startswith("[E]")]
    assert code == 2 and len(errors) == 1, log
    assert "Input 'x'" in errors[0] and "float32 [2, 1, 8]" in errors[0] and "Traceback" not in log

"""Reading the tensor files users already have: Polygraphy JSON written by the real Polygraphy
library (input feed lists and RunResults) and NumPy .npz archives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from polygraphy.comparator import IterationResult, RunResults
from polygraphy.json import save_json

from reducer_core.errors import UsageError
from reducer_core.tensors import load_tensor_file, merge_samples


def _assert_same(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert list(actual) == list(expected)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        np.testing.assert_array_equal(actual[name], value)


def test_polygraphy_input_list_gives_one_sample_per_feed_dict(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    feeds: list[dict[str, np.ndarray]] = [
        {"x": rng.standard_normal((2, 3)).astype(np.float32), "ids": np.arange(4, dtype=np.int64)},
        {"x": rng.standard_normal((2, 3)).astype(np.float32), "ids": np.arange(4, 8, dtype=np.int64)},
    ]
    save_json(feeds, str(tmp_path / "inputs.json"))

    samples = load_tensor_file(tmp_path / "inputs.json")

    assert len(samples) == 2
    for sample, feed in zip(samples, feeds, strict=True):
        _assert_same(sample, feed)


def test_polygraphy_run_results_keep_output_names_and_dtypes(tmp_path: Path) -> None:
    first = {"y": np.linspace(0, 1, 6, dtype=np.float16).reshape(2, 3), "mask": np.array([True, False])}
    second = {"y": np.full((2, 3), 7, dtype=np.float16), "mask": np.array([False, False])}
    results = RunResults()
    results.append(
        (
            "onnxrt-runner-N0",
            [IterationResult(first, runner_name="onnxrt-runner-N0"), IterationResult(second, runner_name="r")],
        )
    )
    results.append(("trt-runner-N0", [IterationResult({"y": np.zeros((2, 3), np.float16)}, runner_name="trt")]))
    save_json(results, str(tmp_path / "outputs.json"))

    samples = load_tensor_file(tmp_path / "outputs.json")

    assert len(samples) == 2, "the first runner's iterations, one sample each"
    _assert_same(samples[0], first)
    _assert_same(samples[1], second)


def test_npz_archive_is_one_sample(tmp_path: Path) -> None:
    arrays: dict[str, np.ndarray] = {"a": np.arange(6, dtype=np.int32).reshape(2, 3), "b": np.ones((1,), np.float64)}
    np.savez(tmp_path / "values.npz", **arrays)

    samples = load_tensor_file(tmp_path / "values.npz")

    assert len(samples) == 1
    _assert_same(samples[0], arrays)


def test_inputs_and_layerwise_outputs_merge_sample_by_sample(tmp_path: Path) -> None:
    x = np.ones((2,), np.float32)
    save_json([{"x": x}], str(tmp_path / "inputs.json"))
    results = RunResults()
    results.append(("runner", [IterationResult({"hidden": x * 3}, runner_name="runner")]))
    save_json(results, str(tmp_path / "golden.json"))

    merged = merge_samples([load_tensor_file(tmp_path / "inputs.json"), load_tensor_file(tmp_path / "golden.json")])

    assert len(merged) == 1
    _assert_same(merged[0], {"x": x, "hidden": x * 3})


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("broken.json", "{not json"),
        ("empty.json", "[]"),
        ("other.json", '{"hello": "world"}'),
        ("broken.npz", "not a zip archive"),
        ("values.txt", "1 2 3"),
    ],
)
def test_unreadable_tensor_files_are_usage_errors(tmp_path: Path, name: str, content: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(UsageError, match=name.replace(".", r"\.")):
        load_tensor_file(path)

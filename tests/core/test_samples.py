"""Input samples from several files (``reducer_core.samples``): files with model inputs are
samples in the order given, files with other tensors add values sample by sample, a file naming
nothing of the model is refused, and every input's shape and type is checked in one line."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from reducer_core.errors import UsageError
from reducer_core.samples import (
    check_input_samples,
    input_samples,
    input_signatures,
    parse_samples_note,
    samples_note,
)


def _model(dims: list[int | str]) -> object:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
    )
    return helper.make_model(graph)


def test_several_files_are_several_samples_in_the_order_given() -> None:
    big, small = np.full((1, 4), 100, np.float32), np.full((1, 4), 0.5, np.float32)
    two = [{"x": small}, {"x": big}]

    loaded = input_samples([("big.npz", [{"x": big}]), ("small.npz", [{"x": small}]), ("in.json", two)], ["x"])

    assert len(loaded) == 4
    assert [float(s["x"][0, 0]) for s in loaded.samples] == [100.0, 0.5, 0.5, 100.0]
    assert loaded.labels == ["big.npz", "small.npz", "in.json#0", "in.json#1"]


def test_a_file_of_other_model_tensors_adds_values_sample_by_sample() -> None:
    x, h = np.ones((1, 4), np.float32), np.full((1, 4), 7, np.float32)

    loaded = input_samples([("layerwise.json", [{"h": h}]), ("inputs.json", [{"x": x}])], ["x"], {"x", "h", "y"})

    assert len(loaded) == 1
    assert set(loaded.samples[0]) == {"x", "h"}
    np.testing.assert_array_equal(loaded.samples[0]["h"], h)


def test_a_file_naming_nothing_of_the_model_is_refused_with_the_names_it_holds() -> None:
    with pytest.raises(UsageError, match=r"'typo.npz' holds none of the model's inputs \(x\).*holds X"):
        input_samples([("typo.npz", [{"X": np.ones((1, 4), np.float32)}])], ["x"], {"x", "h", "y"})


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (np.ones((2, 1, 4), np.float32), ["float32 [1, 4]", "float32 [2, 1, 4]", "stacked"]),
        (np.ones((1, 5), np.float32), ["float32 [1, 4]", "float32 [1, 5]"]),
        (np.ones((1, 4), np.float64), ["float32 [1, 4]", "float64 [1, 4]"]),
    ],
)
def test_an_input_of_another_shape_or_type_is_one_line_naming_both(value: np.ndarray, words: list[str]) -> None:
    loaded = input_samples([("ok.npz", [{"x": np.ones((1, 4), np.float32)}]), ("bad.npz", [{"x": value}])], ["x"])

    with pytest.raises(UsageError) as info:
        check_input_samples(loaded, input_signatures(_model([1, 4])))  # type: ignore[arg-type]

    message = str(info.value)
    assert "\n" not in message
    assert "Input 'x' of sample 1 (bad.npz)" in message
    for word in words:
        assert word in message


def test_free_dims_take_any_size_and_overrides_fix_them() -> None:
    loaded = input_samples([("a.npz", [{"x": np.ones((3, 4), np.float32)}])], ["x"])
    check_input_samples(loaded, input_signatures(_model(["N", 4])))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"wants float32 \[2, 4\]"):
        check_input_samples(loaded, input_signatures(_model(["N", 4]), {"x": [2, 4]}))  # type: ignore[arg-type]


def test_the_samples_note_reads_back() -> None:
    detail = f"{samples_note(3, [1, 2])}; sample 1: outputs beyond tolerance: y"
    report = parse_samples_note(detail)
    assert report is not None and report.judged == 3 and report.failing == (1, 2)
    assert parse_samples_note(samples_note(2, [])) is not None
    assert parse_samples_note("exit=1") is None

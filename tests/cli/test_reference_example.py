"""The reference example (Polygraphy's debug reduce example) works as written, in every mode."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from examples.build_example_model import build_example_model
from reducer_cli.main import run


@pytest.mark.parametrize("mode", ["auto", "bisect", "linear", "minimize"])
def test_reference_example_reduces_to_the_single_mul(in_tmp: Path, mode: str) -> None:
    onnx.save(build_example_model(), "model.onnx")
    code = run(
        [
            "reduce",
            "model.onnx",
            "-o",
            "reduced.onnx",
            "--mode",
            mode,
            "--fail-regex",
            "Op: Mul",
            "--check",
            "onnx-reducer",
            "inspect",
            "polygraphy_debug.onnx",
        ]
    )
    assert code == 0
    reduced = onnx.load("reduced.onnx")
    assert [n.op_type for n in reduced.graph.node] == ["Mul"]
    onnx.checker.check_model(reduced)
    assert not Path("polygraphy_debug.onnx").exists(), "the iteration artifact is removed at the end"

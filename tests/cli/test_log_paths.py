"""No temporary paths in the log (issue 29): a message that quotes a runtime's error (here the
fallback shape inference, whose onnxruntime error names the model it loaded from the run's scratch
folder) says the file's name, not the folder the run made and removes, on one line. The worker
logs the same engine messages (worker.prepared), so the server's log is clean too."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from reducer_cli.main import run


def _custom_op_model() -> onnx.ModelProto:
    """x -> Relu -> Bogus (a custom domain onnxruntime does not know) -> Relu -> y: the Bogus output
    has no shape, so the fallback inference runs onnxruntime, which cannot load the model."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="first"),
        helper.make_node("Bogus", ["a"], ["b"], name="bogus", domain="my.dom"),
        helper.make_node("Relu", ["b"], ["y"], name="last"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.dom", 1)])
    model.ir_version = 8
    return model


def test_a_runtime_error_in_the_log_names_no_temporary_folder(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx.save(_custom_op_model(), "custom.onnx")
    Path("spec.yaml").write_text("kind: op-present\nops: [Bogus]\n")
    assert run(["reduce", "custom.onnx", "-o", "reduced.onnx", "--no-progress", "--check-spec", "spec.yaml"]) == 0
    log = capsys.readouterr().err
    lines = [line for line in log.splitlines() if "Fallback inference failed" in line]
    assert len(lines) == 1, log
    line = lines[0]
    assert "is not a registered function/op" in line and line.endswith("keeping ONNX shapes."), line
    assert "fallback.onnx" in line  # the file, by its name
    for folder in (str(in_tmp), tempfile.gettempdir(), ".onnx-reducer-", "onnx-reducer-fallback-"):
        assert folder not in line, line
    assert "^^^" not in log

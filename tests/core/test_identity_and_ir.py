"""What ties cached verdicts to a model (graph fingerprint, extraction options), old IR versions,
and the workspace's clean-up when preparing a model fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.workspace import ReduceOptions, load_workspace
from reducer_core.candidate import Candidate
from reducer_core.errors import UsageError
from reducer_core.extract import extract
from reducer_core.graph import GraphIndex
from reducer_core.prepare import prepare


class QuietLog:
    def info(self, message: str) -> None:
        pass

    def warning(self, message: str) -> None:
        pass


def leaky_model(alpha: float, weight: float, ir_version: int = 8) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.full((2,), weight, dtype=np.float32), name="w")
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["a"], alpha=alpha, name="leaky"),
        helper.make_node("Mul", ["a", "w"], ["y"], name="scale"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [w],
    )
    if ir_version < 4:  # IR 3 lists every initializer as a graph input too
        graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [2]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)])
    model.ir_version = ir_version
    return model


def fingerprint(model: onnx.ModelProto) -> str:
    return GraphIndex.build(prepare(model)).fingerprint


def test_fingerprint_sees_attributes_and_inline_weights() -> None:
    base = fingerprint(leaky_model(0.01, 1.0))
    assert fingerprint(leaky_model(0.01, 1.0)) == base
    assert fingerprint(leaky_model(5.0, 1.0)) != base  # an attribute changed
    assert fingerprint(leaky_model(0.01, 2.0)) != base  # a weight changed


def test_ir3_candidates_are_valid_models() -> None:
    original = leaky_model(0.01, 1.0, ir_version=3)
    ort.InferenceSession(original.SerializeToString())  # the original loads
    index = GraphIndex.build(prepare(original))
    for nodes in ({0}, {1}, {0, 1}):
        model = extract(index, Candidate(frozenset(nodes)))
        onnx.checker.check_model(model, full_check=True)
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_extraction_options_are_part_of_the_identity(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=np.ones(2, dtype=np.float32))
    base = ReduceOptions(model=tmp_path / "m.onnx", work_dir=tmp_path)
    variants = [
        ReduceOptions(model=base.model, work_dir=tmp_path, seed=2),
        ReduceOptions(model=base.model, work_dir=tmp_path, input_shapes={"x": [2]}),
        ReduceOptions(model=base.model, work_dir=tmp_path, load_inputs=[inputs]),
    ]
    identities = {base.identity, *(v.identity for v in variants)}
    assert len(identities) == 4
    np.savez(inputs, x=np.zeros(2, dtype=np.float32))  # same file name, other values
    assert ReduceOptions(model=base.model, work_dir=tmp_path, load_inputs=[inputs]).identity not in identities


def test_a_failed_preparation_leaves_no_scratch_copy_of_the_weights(tmp_path: Path) -> None:
    model = leaky_model(0.01, 1.0)
    big = numpy_helper.from_array(np.ones(4096, dtype=np.float32), name="unused_big")
    model.graph.initializer.append(big)  # >= 1 KB: externalized into the scratch folder
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    bad_inputs = tmp_path / "bad.npz"
    bad_inputs.write_bytes(b"not an npz archive")
    work = tmp_path / "work"
    options = ReduceOptions(model=path, work_dir=work, load_inputs=[bad_inputs])
    with pytest.raises(UsageError):
        load_workspace(options, QuietLog())
    assert list(work.iterdir()) == []

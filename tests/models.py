"""Tiny real ONNX models built in code, and an engine driver with a fake checker (Polygraphy's
test style: the "check" fails when given node names are present in the candidate)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.graph import GraphIndex
from reducer_core.prepare import prepare
from reducer_core.strategies import SearchSpace, Strategy
from reducer_core.verdict import Verdict, VerdictKind
from tests.oracle_reduction import Reduction, ReductionResult

OPSET = 17
IR_VERSION = 8
FLOAT = TensorProto.FLOAT


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[str],
    outputs: Sequence[str],
    shape: Sequence[int] = (2, 3),
    initializers: Sequence[onnx.TensorProto] = (),
    opset: int = OPSET,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "test_graph",
        [helper.make_tensor_value_info(name, FLOAT, list(shape)) for name in inputs],
        [helper.make_tensor_value_info(name, FLOAT, list(shape)) for name in outputs],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def branchy_model(prefix: str = "", suffix: str = "") -> onnx.ModelProto:
    """Two inputs, two outputs, side branches, one distinct op type per node::

    A = Relu(x0)   B = Neg(y0)    C = Add(a, b)   D = Sigmoid(c) -> out0
    E = Mul(b, b)  G = Abs(x0)    H = Max(e, g)   F = Sub(c, h)  -> out1

    ``prefix``/``suffix`` decorate node names, e.g. so a check can grep for them in the file.
    """
    nodes = [
        helper.make_node("Relu", ["x0"], ["a"], name="A"),
        helper.make_node("Neg", ["y0"], ["b"], name="B"),
        helper.make_node("Add", ["a", "b"], ["c"], name="C"),
        helper.make_node("Sigmoid", ["c"], ["out0"], name="D"),
        helper.make_node("Mul", ["b", "b"], ["e"], name="E"),
        helper.make_node("Abs", ["x0"], ["g"], name="G"),
        helper.make_node("Max", ["e", "g"], ["h"], name="H"),
        helper.make_node("Sub", ["c", "h"], ["out1"], name="F"),
    ]
    for node in nodes:
        node.name = f"{prefix}{node.name}{suffix}"
    return make_model(nodes, ["x0", "y0"], ["out0", "out1"])


BRANCHY_NODES = ("A", "B", "C", "D", "E", "G", "H", "F")


def weighted_model() -> onnx.ModelProto:
    """MatMul -> Mul -> MatMul (NodeP_, NodeQ_, NodeR_) with 64 KiB weights each: iteration models
    (and a check) reference them in a weight file while the written (or stored) model has them
    inline, so the written file is never byte-equal to a judged one and is checked once more."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((128, 128), dtype=np.float32), f"W{i}") for i in (1, 2, 3)]
    info = helper.make_tensor_value_info
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h1"], name="NodeP_"),
        helper.make_node("Mul", ["h1", "W2"], ["h2"], name="NodeQ_"),
        helper.make_node("MatMul", ["h2", "W3"], ["y"], name="NodeR_"),
    ]
    graph = helper.make_graph(
        nodes, "weighted", [info("x", TensorProto.FLOAT, [1, 128])], [info("y", TensorProto.FLOAT, [1, 128])], weights
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def index_of(model: onnx.ModelProto, shape_inference: bool = True) -> GraphIndex:
    return GraphIndex.build(prepare(model, shape_inference=shape_inference))


def names_in(index: GraphIndex, candidate: Candidate | frozenset[int]) -> set[str]:
    nodes = candidate.nodes if isinstance(candidate, Candidate) else candidate
    return {index.nodes[n].name for n in nodes}


FAIL = Verdict(VerdictKind.FAIL, "fake")
PASS = Verdict(VerdictKind.PASS)


@dataclass
class FakeChecker:
    """An oracle over node names; records every candidate it is asked about."""

    index: GraphIndex
    fails: Callable[[set[str]], bool]
    seen: list[Candidate] = field(default_factory=list)

    def __call__(self, candidate: Candidate, iteration: int) -> Verdict:
        self.seen.append(candidate)
        return FAIL if self.fails(names_in(self.index, candidate)) else PASS


def fails_with_all(culprits: Collection[str]) -> Callable[[set[str]], bool]:
    wanted = set(culprits)
    return lambda present: wanted <= present


def reduce_with(
    index: GraphIndex,
    fails: Callable[[set[str]], bool],
    mode: str,
    reduce_inputs: bool = True,
    reduce_outputs: bool = True,
) -> tuple[ReductionResult, FakeChecker, Strategy]:
    space = SearchSpace(index, index.all_nodes(), reduce_inputs, reduce_outputs)
    strategy = Strategy(space, mode)
    checker = FakeChecker(index, fails)
    result = Reduction(strategy, checker, VerdictCache(index.fingerprint, "fake")).run()
    return result, checker, strategy


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for the model's graph inputs (fixed shapes; symbolic dims become 1)."""
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        tensor_type = info.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        feeds[info.name] = rng.standard_normal(dims).astype(dtype)
    return feeds

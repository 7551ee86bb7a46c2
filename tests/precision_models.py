"""Models whose fp16 conversion overflows in a known place, for ``precision`` tests (built here;
no model files are committed)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from bench.precision_models import all_values
from checks.fp16_model import storage_real
from tests.models import IR_VERSION, OPSET

FLOAT = TensorProto.FLOAT
# Inputs in [70, 100]: x * 1000 is beyond fp16's largest value (65504), x itself is not.
COMPARE_FP16 = """
kind: compare
reference: {runtime: onnxruntime}
target: {runtime: onnxruntime, precision: fp16}
tolerance: {atol: 0.01, rtol: 0.01}
input_range: [70, 100]
"""


def make_model(nodes: list[onnx.NodeProto], outputs: list[str]) -> onnx.ModelProto:
    constants = [helper.make_tensor("big", FLOAT, [], [1000.0]), helper.make_tensor("one", FLOAT, [], [1.0])]
    graph = helper.make_graph(
        nodes,
        "precision",
        [helper.make_tensor_value_info("x", FLOAT, [2, 3])],
        [helper.make_tensor_value_info(name, FLOAT, [2, 3]) for name in outputs],
        initializer=constants,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def one_node_overflows() -> onnx.ModelProto:
    """``scale_up`` writes an output beyond fp16's range; the other branch is harmless."""
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Mul", ["a", "big"], ["y"], name="scale_up"),
            helper.make_node("Add", ["a", "one"], ["b"], name="add_one"),
            helper.make_node("Neg", ["b"], ["z"], name="negate"),
        ],
        ["y", "z"],
    )


def two_nodes_overflow() -> onnx.ModelProto:
    """A Mul beyond fp16's range, then a Div back: the tensor between them overflows, so both its
    writer and its reader must stay fp32."""
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Mul", ["a", "big"], ["h"], name="scale_up"),
            helper.make_node("Div", ["h", "big"], ["y"], name="scale_down"),
            helper.make_node("Add", ["y", "one"], ["b"], name="add_one"),
            helper.make_node("Neg", ["b"], ["z"], name="negate"),
        ],
        ["z"],
    )


def gather_fails_anyway() -> onnx.ModelProto:
    """A Gather of row 5 of a 2x3 input: a runtime error in any precision (an ``error`` check fails
    with every node in fp32 too), in a model the checker accepts."""
    model = make_model([helper.make_node("Gather", ["x", "row"], ["y"], name="bad_gather")], ["y"])
    model.graph.initializer.append(helper.make_tensor("row", TensorProto.INT64, [1], [5]))
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1
    return model


def gelu_overflow() -> onnx.ModelProto:
    """A BERT feed-forward block whose bias ``Add`` overflows fp16 (about 137,000 > 65,504) into an
    erf GELU. The answer keeps 4 nodes: ``bias_add``, ``gelu_mul``, ``gelu_half`` and
    ``down_proj``; ``bias_add``'s output ``h`` has two readers, the kept ``gelu_mul`` and the fp16
    ``gelu_div`` (which reads inf, and Erf(inf) = 1 is what fp32 gives), so ``h`` must stay fp32
    between two kept nodes while a Cast feeds the fp16 reader (onnxconverter-common's
    ``node_block_list`` stores it in fp16 there, and overflows)."""
    rng = np.random.default_rng(7)
    up = np.full((3, 4), 200.0, np.float32) + rng.uniform(0, 10, (3, 4)).astype(np.float32)
    bias = np.full((4,), 77000.0, np.float32)
    down = rng.uniform(0.0005, 0.001, (4, 3)).astype(np.float32)
    weights = [
        numpy_helper.from_array(up, "up_w"),
        numpy_helper.from_array(bias, "up_b"),
        numpy_helper.from_array(down, "down_w"),
        helper.make_tensor("sqrt2", FLOAT, [], [1.4142135]),
        helper.make_tensor("half", FLOAT, [], [0.5]),
        helper.make_tensor("one", FLOAT, [], [1.0]),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "up_w"], ["u"], name="up_proj"),
        helper.make_node("Add", ["u", "up_b"], ["h"], name="bias_add"),
        helper.make_node("Div", ["h", "sqrt2"], ["d"], name="gelu_div"),
        helper.make_node("Erf", ["d"], ["e"], name="gelu_erf"),
        helper.make_node("Add", ["e", "one"], ["e1"], name="gelu_add"),
        helper.make_node("Mul", ["h", "e1"], ["m"], name="gelu_mul"),
        helper.make_node("Mul", ["m", "half"], ["g"], name="gelu_half"),
        helper.make_node("MatMul", ["g", "down_w"], ["y"], name="down_proj"),
        helper.make_node("Relu", ["y"], ["z"], name="out_relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "gelu_overflow",
        [helper.make_tensor_value_info("x", FLOAT, [2, 3])],
        [helper.make_tensor_value_info("z", FLOAT, [2, 4 - 1])],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


GELU_KEEP = ["bias_add", "gelu_mul", "gelu_half", "down_proj"]
# Inputs in [90, 100]: up_proj writes about 60,000 (fp16 holds it), bias_add about 137,000.
COMPARE_GELU = COMPARE_FP16.replace("input_range: [70, 100]", "input_range: [90, 100]")


def real_fp16_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """A typed (mixed-precision) model's outputs with fp16 storage made real on onnxruntime's CPU
    provider (every fp16 tensor rounded through fp16, no graph optimisation)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(storage_real(model).SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feeds)]


# The answer once no fp16 tensor holds inf: gelu_div reads bias_add's 137,000 (inf in fp16) and
# writes about 97,000, which gelu_erf then reads: both join the 4 nodes the check alone needs.
GELU_FINITE_KEEP = ["bias_add", "gelu_div", "gelu_erf", "gelu_mul", "gelu_half", "down_proj"]


def nonfinite_fp16_tensors(mixed: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, int]:
    """Every tensor the mixed model types fp16 that holds inf or NaN, with fp16 storage made real
    (every intermediate captured): ``{name: how many values}``."""
    types = {v.name: v.type.tensor_type.elem_type for v in [*mixed.graph.value_info, *mixed.graph.output]}
    values = all_values(storage_real(mixed), feeds)
    counts = {name: int((~np.isfinite(values[name])).sum()) for name, t in types.items() if t == TensorProto.FLOAT16}
    return {name: count for name, count in counts.items() if count}


def autocast_like_fp32_nodes(model: onnx.ModelProto, feeds: dict[str, np.ndarray], data_max: float = 65504.0) -> int:
    """How many nodes ModelOpt AutoCast with ``--data_max 65504`` keeps in fp32 by its range rule,
    emulated: the nodes one of whose float inputs or outputs (weights included) exceeds
    ``data_max`` in magnitude in the fp32 model's run."""
    values = all_values(model, feeds) | {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    values |= feeds

    def beyond(name: str) -> bool:
        value = values.get(name)
        return value is not None and value.dtype.kind == "f" and bool(np.abs(value).max(initial=0.0) > data_max)

    return sum(1 for node in model.graph.node if any(beyond(n) for n in [*node.input, *node.output] if n))


def gelu_overflow_scaled_down() -> onnx.ModelProto:
    """``gelu_overflow`` whose Erf reads ``h / 4 * 1e-4``: ``gelu_div`` (h / 4, about 34,000) fits
    fp16 once it reads h in fp32, and ``gelu_scale`` (times 1e-4) then reads a finite value. With
    the search's 4 nodes, h's Cast to fp16 is inf, so are ``d`` and ``q`` (the inf flows through
    ``gelu_scale``) and Erf gives 1, as fp32 does: only ``gelu_div``, where the inf starts, must
    move to fp32, not ``gelu_scale``, which merely passes it on."""
    model = gelu_overflow()
    graph = model.graph
    graph.initializer.extend(
        [helper.make_tensor("four", FLOAT, [], [4.0]), helper.make_tensor("tiny", FLOAT, [], [1e-4])]
    )
    nodes = list(graph.node)
    div = next(i for i, n in enumerate(nodes) if n.name == "gelu_div")
    nodes[div].input[1] = "four"
    nodes.insert(div + 1, helper.make_node("Mul", ["d", "tiny"], ["q"], name="gelu_scale"))
    next(n for n in nodes if n.name == "gelu_erf").input[0] = "q"
    del graph.node[:]
    graph.node.extend(nodes)
    return model

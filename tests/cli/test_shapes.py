"""Shapes, dtypes and structure through `onnx-reducer reduce`: --model-input-shapes (with and
without fallback inference), --no-shape-inference, automatic fallback for dtypes ONNX cannot
infer, Constant lowering, unsorted graphs, If/Loop bodies with outer-scope references, and
freezing of removed branches from --load-inputs values (Polygraphy JSON)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from polygraphy.comparator import IterationResult, RunResults
from polygraphy.json import save_json

FLOAT = TensorProto.FLOAT
info = helper.make_tensor_value_info


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
    extra_opsets: Sequence[onnx.OperatorSetIdProto] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), *extra_opsets])
    model.ir_version = 9
    return model


def reduce(model: onnx.ModelProto, op_regex: str, *options: str) -> tuple[int, onnx.ModelProto | None, str]:
    """Run `onnx-reducer reduce` on ``model`` (saved as model.onnx in the cwd) with an op-type regex
    check, as a user would; every iteration model is kept under arts/good and arts/bad.
    Returns the exit code, the reduced model and the log (stderr). ``--no-reduce-data``: these
    tests are about the shapes graph reduction gives (smaller inputs: ``test_cli_data.py``)."""
    onnx.save(model, "model.onnx")
    argv = ["onnx-reducer", "reduce", "model.onnx", "-o", "reduced.onnx", "--no-progress", "--no-reduce-data", *options]
    argv += ["--artifacts", "polygraphy_debug.onnx", "--art-dir", "arts"]
    argv += ["--fail-regex", op_regex, "--check", "onnx-reducer", "inspect", "polygraphy_debug.onnx"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    reduced = onnx.load("reduced.onnx") if Path("reduced.onnx").exists() else None
    return done.returncode, reduced, done.stderr


def iteration_models() -> list[onnx.ModelProto]:
    paths = sorted(Path("arts").glob("*/*.onnx"))
    assert paths, "--artifacts kept the iteration models"
    return [onnx.load(str(p)) for p in paths]


def dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def input_names(model: onnx.ModelProto) -> list[str]:
    initializers = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initializers]


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feeds)]


# ---- symbolic dims ----


def symbolic_model() -> onnx.ModelProto:
    """x[N,3] -> Relu -> Mul -> Add(C) -> y[N,3]."""
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Mul", ["a", "a"], ["b"], name="mul"),
            helper.make_node("Add", ["b", "C"], ["y"], name="add"),
        ],
        [info("x", FLOAT, ["N", 3])],
        [info("y", FLOAT, ["N", 3])],
        [numpy_helper.from_array(np.ones(3, np.float32), "C")],
    )


@pytest.mark.parametrize("fallback", [[], ["--force-fallback-shape-inference"]], ids=["onnx", "fallback"])
def test_model_input_shapes_fix_every_iteration_models_shapes(in_tmp: Path, fallback: list[str]) -> None:
    code, reduced, log = reduce(symbolic_model(), "Op: Mul", "--model-input-shapes", "x:[2,3]", *fallback)

    assert code == 0 and reduced is not None, log
    assert ops(reduced) == ["Mul"]
    assert [(i.name, dims(i)) for i in reduced.graph.input] == [("a", [2, 3])]
    assert [(o.name, dims(o)) for o in reduced.graph.output] == [("b", [2, 3])]
    for model in iteration_models():
        for value in [*model.graph.input, *model.graph.output]:
            assert dims(value) == [2, 3], f"{value.name} of an iteration model has shape {dims(value)}"
    assert ("fallback inference" in log) == bool(fallback)
    assert "dynamic input shapes" not in log
    run_ort(reduced, {"a": np.ones((2, 3), np.float32)})


def image_model() -> onnx.ModelProto:
    """x[N,C,H,W] -> Relu -> Mul -> Neg -> y: the shapes come from --model-input-shapes only."""
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Mul", ["a", "a"], ["b"], name="mul"),
            helper.make_node("Neg", ["b"], ["y"], name="neg"),
        ],
        [info("x", FLOAT, ["N", "C", "H", "W"])],
        [info("y", FLOAT, ["N", "C", "H", "W"])],
    )


@pytest.mark.parametrize("data", [[], ["--reduce-data"]], ids=["default", "reduce-data"])
def test_the_shapes_of_model_input_shapes_are_never_shrunk(in_tmp: Path, data: list[str]) -> None:
    """Polygraphy's test of the flag: x:[1,2,5,5] gives a Mul whose input is [1,2,5,5], with the
    data step (it keeps the sizes the user gave) or without it (the default)."""
    onnx.save(image_model(), "model.onnx")
    argv = ["onnx-reducer", "reduce", "model.onnx", "-o", "reduced.onnx", "--no-progress", *data]
    argv += ["--model-input-shapes", "x:[1,2,5,5]"]
    argv += ["--fail-regex", "Op: Mul", "--check", "onnx-reducer", "inspect", "polygraphy_debug.onnx"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    reduced = onnx.load("reduced.onnx")
    assert ops(reduced) == ["Mul"]
    assert [(i.name, dims(i)) for i in reduced.graph.input] == [("a", [1, 2, 5, 5])]
    assert [(o.name, dims(o)) for o in reduced.graph.output] == [("b", [1, 2, 5, 5])]
    if data:
        assert "keeps the sizes of --model-input-shapes (2, 5)" in done.stderr


def test_without_model_input_shapes_the_dims_stay_symbolic_and_the_user_is_told(in_tmp: Path) -> None:
    code, reduced, log = reduce(symbolic_model(), "Op: Mul")

    assert code == 0 and reduced is not None, log
    assert [(i.name, dims(i)) for i in reduced.graph.input] == [("a", ["N", 3])]
    assert "--model-input-shapes" in log


def test_model_input_shapes_naming_an_unknown_input_is_a_usage_error(in_tmp: Path) -> None:
    code, _, log = reduce(symbolic_model(), "Op: Mul", "--model-input-shapes", "nope:[2,3]")
    assert code == 2
    assert "Model inputs: ['x']" in log


def test_no_shape_inference_still_gives_boundary_dtypes_from_a_runtime_run(in_tmp: Path) -> None:
    code, reduced, log = reduce(symbolic_model(), "Op: Mul", "--no-shape-inference", "--model-input-shapes", "x:[4,3]")

    assert code == 0 and reduced is not None, log
    assert ops(reduced) == ["Mul"]
    (a,) = reduced.graph.input
    assert a.type.tensor_type.elem_type == FLOAT
    assert dims(a) == [4, 3], "shapes come from the onnxruntime run, not from ONNX shape inference"
    assert "fallback inference" in log


def test_dtypes_onnx_cannot_infer_come_from_fallback_inference_automatically(in_tmp: Path) -> None:
    """com.microsoft.Gelu has no ONNX schema: ONNX infers nothing for it or anything after it."""
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Gelu", ["a"], ["g"], name="gelu", domain="com.microsoft"),
            helper.make_node("Mul", ["g", "g"], ["b"], name="mul"),
            helper.make_node("Neg", ["b"], ["y"], name="neg"),
        ],
        [info("x", FLOAT, [2, 3])],
        [info("y", FLOAT, None)],
        extra_opsets=[helper.make_opsetid("com.microsoft", 1)],
    )
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    assert "g" not in {v.name for v in inferred.graph.value_info}, "precondition: ONNX cannot type 'g'"

    code, reduced, log = reduce(model, "Op: Mul")

    assert code == 0 and reduced is not None, log
    assert ops(reduced) == ["Mul"]
    assert [(i.name, i.type.tensor_type.elem_type, dims(i)) for i in reduced.graph.input] == [("g", FLOAT, [2, 3])]
    assert "fallback inference" in log
    (out,) = run_ort(reduced, {"g": np.full((2, 3), 3, np.float32)})
    np.testing.assert_array_equal(out, np.full((2, 3), 9, np.float32))


# ---- structure ----


def test_constant_nodes_are_lowered_so_no_iteration_model_has_spurious_inputs(in_tmp: Path) -> None:
    model = make_model(
        [
            helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.full(3, 2, np.float32))),
            helper.make_node("Add", ["x", "c"], ["s"], name="add"),
            helper.make_node("Constant", [], ["d"], value_floats=[1.0, 2.0, 3.0]),
            helper.make_node("Mul", ["s", "d"], ["m"], name="mul"),
            helper.make_node("Relu", ["m"], ["y"], name="relu"),
        ],
        [info("x", FLOAT, [2, 3])],
        [info("y", FLOAT, [2, 3])],
    )

    code, reduced, log = reduce(model, "Op: Mul")

    assert code == 0 and reduced is not None, log
    assert ops(reduced) == ["Mul"]
    assert input_names(reduced) == ["s"], "the Constant's value stays a constant, not a graph input"
    assert [t.name for t in reduced.graph.initializer] == ["d"]
    for iteration in iteration_models():
        assert not {"c", "d"} & set(input_names(iteration))
        assert "Constant" not in ops(iteration)
    (out,) = run_ort(reduced, {"s": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(out, np.tile(np.array([1, 2, 3], np.float32), (2, 1)))


@pytest.mark.parametrize("mode", ["bisect", "linear", "auto"])
def test_a_model_whose_nodes_are_not_topologically_sorted(in_tmp: Path, mode: str) -> None:
    nodes = [
        helper.make_node("Relu", ["b"], ["y"], name="relu"),
        helper.make_node("Mul", ["a", "a"], ["b"], name="mul"),
        helper.make_node("Neg", ["x"], ["a"], name="neg"),
    ]
    code, reduced, log = reduce(make_model(nodes, [info("x", FLOAT, [2, 3])], [info("y", FLOAT, [2, 3])]), "Op: Mul")

    assert code == 0 and reduced is not None, log
    assert ops(reduced) == ["Mul"]
    onnx.checker.check_model(reduced)
    for iteration in iteration_models():
        onnx.checker.check_model(iteration)  # every iteration model is sorted, or this raises
    (out,) = run_ort(reduced, {"a": np.full((2, 3), -2, np.float32)})
    np.testing.assert_array_equal(out, np.full((2, 3), 4, np.float32))


def if_model() -> onnx.ModelProto:
    """r = Relu(x), n = Neg(x); z = If(cond) then r + n else r - n (both read r, n from outside)."""
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["r", "n"], ["t"])], "then", [], [info("t", FLOAT, [2, 3])]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Sub", ["r", "n"], ["e"])], "else", [], [info("e", FLOAT, [2, 3])]
    )
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Neg", ["x"], ["n"], name="neg"),
            helper.make_node("If", ["cond"], ["z"], name="if", then_branch=then_branch, else_branch=else_branch),
            helper.make_node("Sigmoid", ["z"], ["y"], name="sigmoid"),
        ],
        [info("x", FLOAT, [2, 3]), info("cond", TensorProto.BOOL, [])],
        [info("y", FLOAT, [2, 3])],
    )


def loop_model() -> onnx.ModelProto:
    """w = Relu(x); v = Loop(3 times) { v + (If(keep) then w else v) } (the If, two scopes deep,
    reads w from the top-level graph)."""
    then_branch = helper.make_graph([helper.make_node("Identity", ["w"], ["t"])], "then", [], [info("t", FLOAT, [2])])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["v_in"], ["e"])], "else", [], [info("e", FLOAT, [2])]
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("If", ["keep"], ["picked"], then_branch=then_branch, else_branch=else_branch),
            helper.make_node("Add", ["v_in", "picked"], ["v_out"]),
        ],
        "body",
        [info("i", TensorProto.INT64, []), info("cond_in", TensorProto.BOOL, []), info("v_in", FLOAT, [2])],
        [info("cond_out", TensorProto.BOOL, []), info("v_out", FLOAT, [2])],
    )
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["w"], name="relu"),
            helper.make_node("Loop", ["trips", "", "x"], ["v"], name="loop", body=body),
            helper.make_node("Neg", ["v"], ["y"], name="neg"),
        ],
        [info("x", FLOAT, [2]), info("keep", TensorProto.BOOL, [])],
        [info("y", FLOAT, [2])],
        [numpy_helper.from_array(np.array(3, np.int64), "trips")],
    )


def test_if_bodies_keep_outer_scope_references_as_graph_inputs(in_tmp: Path) -> None:
    code, reduced, log = reduce(if_model(), "Op: If", "--no-reduce-bodies")  # branches whole, as Polygraphy

    assert code == 0 and reduced is not None, log
    assert ops(reduced) == ["If"]
    assert sorted(input_names(reduced)) == ["cond", "n", "r"], "the body's outer-scope reads become inputs"
    onnx.checker.check_model(reduced, full_check=True)
    r, n = np.full((2, 3), 5, np.float32), np.full((2, 3), 2, np.float32)
    for cond, expected in ((True, r + n), (False, r - n)):
        (out,) = run_ort(reduced, {"cond": np.array(cond), "r": r, "n": n})
        np.testing.assert_array_equal(out, expected)
    for iteration in iteration_models():  # every candidate that cut r or n off still loads and runs
        feeds = {"x": np.ones((2, 3), np.float32), "cond": np.array(True), "r": r, "n": n, "z": r}
        run_ort(iteration, {k: v for k, v in feeds.items() if k in input_names(iteration)})


def test_nested_loop_and_if_bodies_read_a_top_level_tensor_two_scopes_up(in_tmp: Path) -> None:
    code, reduced, log = reduce(loop_model(), "Op: Loop", "--no-reduce-bodies")

    assert code == 0 and reduced is not None, log
    assert ops(reduced) == ["Loop"]
    assert sorted(input_names(reduced)) == ["keep", "w", "x"]
    assert [t.name for t in reduced.graph.initializer] == ["trips"]
    x, w = np.array([1, 2], np.float32), np.array([10, 20], np.float32)
    (kept,) = run_ort(reduced, {"x": x, "keep": np.array(True), "w": w})
    np.testing.assert_array_equal(kept, x + 3 * w)
    (doubled,) = run_ort(reduced, {"x": x, "keep": np.array(False), "w": w})
    np.testing.assert_array_equal(doubled, x * 8)


# ---- input side: --no-reduce-inputs and freezing of removed branches ----


def two_branch_model() -> onnx.ModelProto:
    """a = Relu(x), b = Neg(x), c = Add(a, b), y = Sigmoid(c): Add has two sibling branches."""
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Neg", ["x"], ["b"], name="neg"),
            helper.make_node("Add", ["a", "b"], ["c"], name="add"),
            helper.make_node("Sigmoid", ["c"], ["y"], name="sigmoid"),
        ],
        [info("x", FLOAT, [2, 3])],
        [info("y", FLOAT, [2, 3])],
    )


X = np.array([[-1.5, 2.0, 0.25], [3.0, -4.0, 5.5]], np.float32)


def frozen_iterations() -> list[onnx.ModelProto]:
    """Iteration models that kept Neg and Add while Relu (the sibling branch) was removed."""
    return [m for m in iteration_models() if ops(m) == ["Neg", "Add"]]


def test_no_reduce_inputs_keeps_the_models_inputs_in_every_iteration(in_tmp: Path) -> None:
    save_json([{"x": X}], "inputs.json")

    code, reduced, log = reduce(two_branch_model(), "Op: Add", "--mode", "bisect", "--no-reduce-inputs")

    assert code == 0 and reduced is not None, log
    assert ops(reduced) == ["Relu", "Neg", "Add"], "only nodes from the end are removed"
    assert input_names(reduced) == ["x"]
    for iteration in iteration_models():
        assert input_names(iteration) == ["x"]
        assert not iteration.graph.initializer, "nothing needs freezing"


def test_removed_sibling_branch_is_frozen_from_polygraphy_input_values(in_tmp: Path) -> None:
    save_json([{"x": X}], "inputs.json")  # what `polygraphy run --save-inputs` writes

    code, reduced, log = reduce(two_branch_model(), "Op: Add", "--mode", "bisect", "--load-inputs", "inputs.json")

    assert code == 0 and reduced is not None, log
    assert ops(reduced) == ["Add"]
    (frozen,) = frozen_iterations()
    assert input_names(frozen) == ["x"], "the kept node's own input stays an input"
    (a,) = frozen.graph.initializer
    assert a.name == "a"
    np.testing.assert_array_equal(numpy_helper.to_array(a), np.maximum(X, 0), "Relu of the loaded x")
    (out,) = run_ort(frozen, {"x": X})
    np.testing.assert_array_equal(out, np.maximum(X, 0) - X)


def test_removed_sibling_branch_is_frozen_from_polygraphy_layerwise_outputs(in_tmp: Path) -> None:
    golden = np.full((2, 3), 42, np.float32)  # not what this model computes: proves where it came from
    save_json([{"x": X}], "inputs.json")
    results = RunResults()
    results.append(("onnxrt-runner", [IterationResult({"a": golden, "c": golden}, runner_name="onnxrt-runner")]))
    save_json(results, "layerwise.json")

    code, reduced, log = reduce(
        two_branch_model(), "Op: Add", "--mode", "bisect", "--load-inputs", "inputs.json", "layerwise.json"
    )

    assert code == 0 and reduced is not None, log
    (frozen,) = frozen_iterations()
    (a,) = frozen.graph.initializer
    np.testing.assert_array_equal(numpy_helper.to_array(a), golden)

"""Intake refuses models no check could run (issue 30, D15): an op of a domain no runtime
registers, where the check runs the model on onnxruntime, and a Tile/Expand whose size input is
computed from small constants (what ONNX's shape inference does not follow) asking for a tensor
far beyond the upload. Both used to be accepted (202) and to fail later. 422 says how to fix."""

from __future__ import annotations

import httpx
import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi import onnxruntime_pybind11_state

from api.validation import RUNTIME_DOMAINS
from tests.service.helpers import OP_PRESENT_MUL, submit

ERROR_SPEC = "kind: error\n"
COMPARE_SPEC = "kind: compare\ntarget: {runtime: onnxruntime, precision: fp16}\n"


def _model(
    nodes: list[onnx.NodeProto], *, functions: tuple[onnx.FunctionProto, ...] = (), domains: tuple[str, ...] = ()
) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
    )
    opsets = [helper.make_opsetid("", 17), *(helper.make_opsetid(d, 1) for d in domains)]
    model = helper.make_model(graph, opset_imports=opsets, functions=list(functions))
    model.ir_version = 8
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def _const(name: str, values: list[int]) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(values, np.int64), name))


def _custom_op_model() -> bytes:
    nodes = [
        helper.make_node("Foo", ["x"], ["f"], name="foo", domain="evil.custom"),
        helper.make_node("Mul", ["f", "f"], ["y"], name="mul"),
    ]
    return _model(nodes, domains=("evil.custom",))


def test_an_op_of_a_domain_no_runtime_registers_is_refused(quiet_client: httpx.Client) -> None:
    model = _custom_op_model()
    for spec in (ERROR_SPEC, COMPARE_SPEC):
        response = submit(quiet_client, model, spec)
        assert response.status_code == 422, response.text
        body = response.json()
        assert body["title"] == "Operator no runtime registers"
        assert "'foo'" in body["detail"] and "evil.custom" in body["detail"]
        assert "model.functions" in body["detail"]  # says how to fix it
        assert "/" not in body["detail"].split("registered function/op")[0]  # no server path


def test_a_custom_domain_is_accepted_where_it_can_run_or_is_not_run(quiet_client: httpx.Client) -> None:
    model = _custom_op_model()
    # op-present runs no runtime; TensorRT finds plugins by name; an error check may ask for this very error
    for spec in (
        OP_PRESENT_MUL,
        "kind: error\ntarget: {runtime: tensorrt}\n",
        "kind: error\nmatch: 'is not a registered function/op'\n",
    ):
        response = submit(quiet_client, model, spec)
        assert response.status_code == 202, (spec, response.text)


def test_a_custom_domain_the_model_defines_as_a_function_is_accepted(quiet_client: httpx.Client) -> None:
    foo = helper.make_function(
        "my.functions",
        "Foo",
        ["a"],
        ["b"],
        [helper.make_node("Neg", ["a"], ["b"])],
        [helper.make_opsetid("", 17)],
    )
    nodes = [
        helper.make_node("Foo", ["x"], ["f"], name="foo", domain="my.functions"),
        helper.make_node("Mul", ["f", "f"], ["y"], name="mul"),
    ]
    model = _model(nodes, functions=(foo,), domains=("my.functions",))
    response = submit(quiet_client, model, ERROR_SPEC)
    assert response.status_code == 202, response.text


def test_onnxruntimes_registered_domains_are_all_accepted() -> None:
    registered = {schema.domain for schema in onnxruntime_pybind11_state.get_all_operator_schema()}
    assert registered <= RUNTIME_DOMAINS, (onnxruntime.__version__, sorted(registered - RUNTIME_DOMAINS))


def _tile_with_computed_repeats(first: int, second: int) -> bytes:
    """Tile's repeats a Concat of two constants times one: ONNX's shape inference leaves them open."""
    nodes = [
        _const("a", [first]),
        _const("b", [second]),
        _const("one", [1, 1]),
        helper.make_node("Concat", ["a", "b"], ["ab"], axis=0),
        helper.make_node("Mul", ["ab", "one"], ["repeats"]),
        helper.make_node("Tile", ["x", "repeats"], ["y"], name="tile"),
    ]
    return _model(nodes)


def test_a_tile_whose_computed_repeats_ask_for_a_huge_tensor_is_refused(quiet_client: httpx.Client) -> None:
    response = submit(quiet_client, _tile_with_computed_repeats(100_000, 150_000), OP_PRESENT_MUL)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["title"] == "Tensor size beyond the upload"
    assert "'tile' (Tile)" in body["detail"] and "[100000, 300000]" in body["detail"]
    assert "Fix those constants" in body["detail"]


def test_an_expand_whose_computed_shape_asks_for_a_huge_tensor_is_refused(quiet_client: httpx.Client) -> None:
    nodes = [
        _const("half", [50_000, 75_000]),
        _const("two", [2]),
        helper.make_node("Mul", ["half", "two"], ["shape"]),
        helper.make_node("Expand", ["x", "shape"], ["e"], name="expand"),
        helper.make_node("Mul", ["e", "e"], ["y"]),
    ]
    response = submit(quiet_client, _model(nodes), OP_PRESENT_MUL)
    assert response.status_code == 422, response.text
    assert "'expand' (Expand)" in response.json()["detail"]


def test_a_small_computed_tile_is_accepted(quiet_client: httpx.Client) -> None:
    response = submit(quiet_client, _tile_with_computed_repeats(3, 4), OP_PRESENT_MUL)
    assert response.status_code == 202, response.text

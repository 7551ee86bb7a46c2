"""An op the runtime does not have (a custom domain's op) is its own verdict, ``crash`` /
``op-not-registered``: never the original failure to reduce, unless an ``error`` check's ``match``
asks for exactly that message."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from checks.build import build_check
from checks.spec import parse_check_spec
from reducer_core.verdict import OP_NOT_REGISTERED_SIGNATURE, Verdict, VerdictKind
from tests.checks.conftest import cli


def _custom_op_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Foo", ["r"], ["f"], name="foo", domain="evil.custom"),
        helper.make_node("Mul", ["f", "f"], ["y"], name="mul"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("evil.custom", 1)])
    model.ir_version = 8
    return model


def test_the_verdict_is_never_a_failure_to_reduce() -> None:
    missing = Verdict(VerdictKind.CRASH, OP_NOT_REGISTERED_SIGNATURE)
    other_crash = Verdict(VerdictKind.CRASH, "signal=SIGSEGV")
    assert not missing.is_failure
    assert not missing.reproduces(other_crash, pinned=False)
    assert not missing.reproduces(Verdict(VerdictKind.FAIL, "error:Fail"), pinned=False)


def test_an_unregistered_op_is_its_own_verdict_unless_the_check_matches_it(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(_custom_op_model(), str(path))
    for spec in ("kind: error", "kind: compare\ntarget: {precision: fp16}"):
        verdict, _ = build_check(parse_check_spec(spec)).run(path)
        assert (verdict.kind, verdict.signature) == (VerdictKind.CRASH, OP_NOT_REGISTERED_SIGNATURE), verdict
        assert "evil.custom:Foo" in verdict.detail
    asked, _ = build_check(parse_check_spec("kind: error\nmatch: 'not a registered function'")).run(path)
    assert asked.kind is VerdictKind.FAIL and asked.signature.startswith("error:match=")


def test_the_command_line_does_not_reduce_an_unregistered_op(tmp_path: Path) -> None:
    onnx.save(_custom_op_model(), str(tmp_path / "model.onnx"))
    (tmp_path / "spec.yaml").write_text("kind: error\n")
    result = cli("reduce", "model.onnx", "-o", "r.onnx", "--check-spec", "spec.yaml", "--no-progress", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "evil.custom:Foo" in result.stderr
    assert not (tmp_path / "r.onnx").exists()

from __future__ import annotations

import json

import pytest

from checks.build import build_check
from checks.spec import (
    CheckSpecError,
    Requirements,
    is_interactive_spec,
    parse_check_spec,
    requirements_of,
)
from reducer_core.errors import UsageError
from tests.checks.conftest import COMPARE_FP16, OP_PRESENT_MUL


def test_issue_documents_parse_as_written() -> None:
    compare = parse_check_spec(COMPARE_FP16)
    assert compare.kind == "compare"
    assert compare.reference is not None and compare.reference.runtime == "onnxruntime"
    assert compare.target is not None and compare.target.precision == "fp16"
    assert compare.tolerance is not None and (compare.tolerance.atol, compare.tolerance.rtol) == (0.001, 0.001)
    op = parse_check_spec(OP_PRESENT_MUL)
    assert op.kind == "op-present" and op.ops == ("Mul",)
    assert not compare.needs_gpu and not op.needs_gpu


def test_json_equals_yaml_and_identity_is_stable() -> None:
    as_json = json.dumps(parse_check_spec(COMPARE_FP16).to_json())
    assert parse_check_spec(as_json) == parse_check_spec(COMPARE_FP16)
    assert parse_check_spec(as_json).identity == parse_check_spec(COMPARE_FP16).identity
    other = parse_check_spec(COMPARE_FP16.replace("0.001, rtol", "0.01, rtol"))
    assert other.identity != parse_check_spec(COMPARE_FP16).identity


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "kind: compare\ntarget: {precision: fp16}\ntolerance: {atol: abc}",
            "tolerance.atol: must be a number >= 0, got 'abc'",
        ),
        ("kind: compare\ntarget: {precision: fp16}\ntolerance: {rtol: -1}", "tolerance.rtol: must be a number >= 0"),
        ("kind: compare\ntarget: {precision: fp8}", "target.precision: must be one of fp32, fp16"),
        ("kind: compare\ntarget: {runtime: tvm}", "target.runtime: must be one of onnxruntime, tensorrt"),
        ("kind: compare\ntarget: {precision: fp16, speed: 3}", "target.speed: unknown field"),
        ("kind: compare\nreference: {}", "target: required"),
        ("kind: nope", "kind: must be one of"),
        ("ops: [Mul]", "kind: required"),
        ("kind: op-present", "ops: give at least one"),
        ("kind: op-present\nops: Mul\ntimeout: 0", "timeout: must be a number > 0"),
        ("kind: op-present\nops: [Mul]\nrepeat: 0", "repeat: must be an integer >= 1"),
        ("kind: op-present\nops: [Mul]\nfail_if: most", "fail_if: must be one of any, all, majority"),
        ("kind: op-present\nops: [Mul]\ntolerance: {atol: 1}", "tolerance: unknown field for kind 'op-present'"),
        ("kind: error\nmatch: '(unclosed'", "match: not a valid regular expression"),
        ("kind: command", "command: must be a string or a list of strings"),
        ("kind: command\ncommand: x\nfail_regex: ['[']", "fail_regex[0]: not a valid regular expression"),
        (
            "kind: compare\ntarget: {runtime: tensorrt, optimization: all}",
            "target.optimization: only for runtime onnxruntime",
        ),
        (
            "kind: compare\ntarget: {precision: fp16}\ntolerance: {per_output: {y: {atol: x}}}",
            "tolerance.per_output.y.atol",
        ),
        ("[1, 2]", "check spec: must be a mapping"),
        ("kind: [", "not valid YAML/JSON"),
        ("kind: op-present\nops: [Mul]\nrepeat: 1000000000", "repeat: must be at most 100"),
        ("kind: op-present\nops: [Mul]\ntimeout: 100000000", "timeout: must be at most"),
        ("kind: op-present\nops: &a [Mul]\nnames: *a", "aliases (*name) are not accepted"),
        ("kind: op-present\nops: " + "[" * 5000 + "]" * 5000, "nested more than 32 levels"),
        ("kind: op-present\nops: " + "{a: " * 5000 + "1" + "}" * 5000, "nested more than 32 levels"),
    ],
)
def test_validation_errors_name_the_field(text: str, message: str) -> None:
    with pytest.raises(CheckSpecError) as info:
        parse_check_spec(text)
    assert message in str(info.value)
    assert isinstance(info.value, UsageError)


def test_gpu_targets_need_a_gpu() -> None:
    assert parse_check_spec("kind: error\ntarget: {runtime: tensorrt, precision: int8}").needs_gpu
    assert parse_check_spec("kind: error\ntarget: {provider: CUDAExecutionProvider}").needs_gpu


def test_command_checks_are_refused_unless_enabled() -> None:
    spec = parse_check_spec("kind: command\ncommand: [true]")
    with pytest.raises(CheckSpecError, match="operator must enable"):
        build_check(spec, allow_command=False)
    assert build_check(spec).identity == spec.identity


def test_golden_kind_needs_a_golden_file() -> None:
    with pytest.raises(CheckSpecError, match="--golden"):
        build_check(parse_check_spec("kind: golden\ntarget: {precision: fp16}"))


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(9)
)


def test_billion_laughs_is_refused_before_anything_expands() -> None:
    with pytest.raises(CheckSpecError, match="aliases"):
        parse_check_spec(BILLION_LAUGHS)


def test_messages_quote_a_bounded_part_of_a_huge_value() -> None:
    huge = "kind: op-present\nops: [Mul]\nrepeat: [" + ", ".join(["[" + ", ".join(["'x' "] * 200) + "]"] * 30) + "]"
    with pytest.raises(CheckSpecError) as info:
        parse_check_spec(huge)
    assert "repeat: must be an integer" in str(info.value)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize(
    "text", ["\x00kind: op-present\nops: [Mul]", "kind: op-present\x07", "\ufffekind: interactive"]
)
def test_control_characters_are_a_spec_error(text: str) -> None:
    """The YAML reader refuses them while the loader is built: a CheckSpecError (4xx), never a crash."""
    assert is_interactive_spec(text) is False
    with pytest.raises(CheckSpecError, match="not valid YAML/JSON: unacceptable character"):
        parse_check_spec(text)
    assert requirements_of(text) == Requirements()

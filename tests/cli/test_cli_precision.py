"""``onnx-reducer precision``: the fewest nodes that must stay fp32 for the fp16 model to pass a
compare spec, on models built here whose fp16 overflow needs exactly those nodes in fp32 (real
checks: onnxruntime in child processes, the CPU provider's fp16 storage)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from checks.build import build_check
from checks.fp16_model import is_mixed
from checks.runtimes.onnxruntime import to_fp16
from checks.spec import CheckSpec, ModelCheck, parse_check_spec
from engine.precision import (
    MixedModelFailedError,
    PrecisionSession,
    autocast_patterns,
    reference_run,
    trtexec_flags,
)
from engine.session import SessionCheck
from engine.workspace import ReduceOptions, load_workspace
from reducer_cli.main import run
from reducer_core.candidate import Candidate
from reducer_core.verdict import VerdictKind
from tests.precision_models import (
    COMPARE_FP16,
    COMPARE_GELU,
    GELU_FINITE_KEEP,
    GELU_KEEP,
    autocast_like_fp32_nodes,
    gather_fails_anyway,
    gelu_overflow,
    gelu_overflow_scaled_down,
    nonfinite_fp16_tensors,
    one_node_overflows,
    real_fp16_outputs,
    two_nodes_overflow,
)


def precision(model: onnx.ModelProto, *options: str, spec: str = COMPARE_FP16) -> int:
    onnx.save(model, "model.onnx")
    Path("spec.yaml").write_text(spec)
    argv = ["precision", "model.onnx", "-o", "mixed.onnx", "--check-spec", "spec.yaml", "--no-progress"]
    return run([*argv, *options])


def outputs(path: str, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, {"x": x})]


def test_one_overflowing_node_is_the_answer(in_tmp: Path, capsys: object) -> None:
    assert precision(one_node_overflows(), "--summary-json", "summary.json") == 0
    summary = json.loads(Path("summary.json").read_text())
    assert summary["keep_fp32"] == ["scale_up"]
    assert summary["fp16_verdict"]["kind"] == "fail"
    assert summary["checks_run"] == len([i for i in summary["iterations"] if not i["cached"]])
    assert [i["phase"] for i in summary["iterations"][:2]] == ["original", "range"]
    assert capsys.readouterr().out.split() == ["scale_up"]  # type: ignore[attr-defined]
    # the mixed model is fp16 but for that node, and computes what the fp32 model does
    mixed = onnx.load("mixed.onnx")
    assert any(t.data_type == TensorProto.FLOAT16 for t in mixed.graph.initializer)
    x = np.random.default_rng(0).uniform(70, 100, (2, 3)).astype(np.float32)
    for got, want in zip(outputs("mixed.onnx", x), outputs("model.onnx", x), strict=True):
        np.testing.assert_allclose(got, want, rtol=0.01, atol=0.01)


def test_two_nodes_that_must_stay_fp32_are_both_the_answer(in_tmp: Path) -> None:
    assert precision(two_nodes_overflow(), "--summary-json", "summary.json") == 0
    assert json.loads(Path("summary.json").read_text())["keep_fp32"] == ["scale_up", "scale_down"]


def test_a_resumed_search_checks_nothing_again(in_tmp: Path) -> None:
    assert precision(two_nodes_overflow(), "--save-debug-replay", "replay.json") == 0
    options = ("--load-debug-replay", "replay.json", "--summary-json", "summary.json")
    assert precision(two_nodes_overflow(), *options) == 0
    summary = json.loads(Path("summary.json").read_text())
    assert summary["keep_fp32"] == ["scale_up", "scale_down"]
    assert summary["checks_run"] == 0 and all(i["cached"] for i in summary["iterations"])


def test_an_fp16_model_that_passes_needs_no_fp32_node(in_tmp: Path) -> None:
    spec = COMPARE_FP16.replace("input_range: [70, 100]", "input_range: [0, 1]")
    assert precision(one_node_overflows(), "--summary-json", "summary.json", spec=spec) == 0
    summary = json.loads(Path("summary.json").read_text())
    assert summary["keep_fp32"] == [] and summary["fp16_already_passes"] is True
    assert summary["checks_run"] == 1


def test_a_failure_with_every_node_in_fp32_is_not_a_precision_problem(in_tmp: Path, capsys: object) -> None:
    spec = "kind: error\ntarget: {runtime: onnxruntime, precision: fp16}\n"
    assert precision(gather_fails_anyway(), spec=spec) == 3
    assert "not a precision problem" in capsys.readouterr().err  # type: ignore[attr-defined]


def test_a_spec_without_an_fp16_target_is_refused_with_what_to_give(in_tmp: Path, capsys: object) -> None:
    assert precision(one_node_overflows(), spec="kind: op-present\nops: [Mul]\n") == 2
    assert "target {runtime: onnxruntime, precision: fp16}" in capsys.readouterr().err  # type: ignore[attr-defined]


def test_unnamed_nodes_are_answered_by_the_names_the_mixed_model_gives_them(in_tmp: Path) -> None:
    model = one_node_overflows()
    for node in model.graph.node:
        node.name = ""
    assert precision(model, "--summary-json", "summary.json") == 0
    (name,) = json.loads(Path("summary.json").read_text())["keep_fp32"]
    assert name == "Mul_1"
    assert name in [n.name for n in onnx.load("mixed.onnx").graph.node]


def test_adjacent_kept_nodes_whose_tensor_has_two_readers_give_a_finite_file(in_tmp: Path) -> None:
    """The BERT failure mode: bias_add's output (about 137,000) is read by the kept gelu_mul and by
    gelu_div. With --allow-nonfinite (the search's answer as it is) the written file keeps it fp32,
    its outputs are finite with fp16 storage made real, computes what the fp32 model does, and was
    judged once more; the summary names the fp16 tensors that hold inf (gelu_div reads the inf of
    a Cast of h to fp16 and writes inf; Erf(inf) = 1 is what fp32 gives). The search starts from
    the range analysis' 6 nodes and tries each once."""
    options = ("--summary-json", "summary.json", "--allow-nonfinite")
    assert precision(gelu_overflow(), *options, spec=COMPARE_GELU) == 0
    summary = json.loads(Path("summary.json").read_text())
    assert summary["keep_fp32"] == GELU_KEEP
    assert summary["fp32_tensors"] == ["h", "m", "g", "y"]  # the answer per tensor
    assert summary["finite"]["added_fp32"] == []
    assert sorted(summary["finite"]["nonfinite_fp16_tensors"]) == ["d", "h__to_fp16"]
    assert summary["verified"] == {"checked": True, "verdict": "pass", "detail": summary["verified"]["detail"]}
    assert summary["reference"] == "fp32 original" and summary["io_types"] == "fp32"
    assert summary["out_of_range_tensors"] == ["d", "g", "h", "m", "up_b"]  # up_b: a weight of 77,000
    assert [i["phase"] for i in summary["iterations"][:2]] == ["original", "range"]
    assert summary["checks_run"] == 8  # the fp16 model, the superset, one per node of the superset
    mixed = onnx.load("mixed.onnx")
    onnx.checker.check_model(mixed, full_check=True)
    assert is_mixed(mixed)
    x = np.random.default_rng(5).uniform(90, 100, (2, 3)).astype(np.float32)
    (got,) = real_fp16_outputs(mixed, {"x": x})
    (want,) = outputs("model.onnx", x)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=0.01)
    assert sorted(nonfinite_fp16_tensors(mixed, {"x": x})) == ["d", "h__to_fp16"]


def test_the_answer_leaves_no_inf_in_any_fp16_tensor(in_tmp: Path, capsys: object) -> None:
    """By default the answer grows by the nodes where an inf starts in an fp16 tensor (gelu_div
    reading h in fp16, then gelu_erf reading gelu_div's 97,000): the written file, every
    intermediate captured with fp16 storage made real, holds no inf or NaN in any fp16 tensor,
    passes the spec against the fp32 original, and keeps no more nodes fp32 than AutoCast's range
    rule with --data_max 65504 would. The answer is also written for AutoCast and trtexec."""
    assert precision(gelu_overflow(), "--summary-json", "summary.json", spec=COMPARE_GELU) == 0
    summary = json.loads(Path("summary.json").read_text())
    assert summary["keep_fp32"] == GELU_FINITE_KEEP
    assert summary["finite"] == {
        "added_fp32": ["gelu_div", "gelu_erf"],
        "searched_fp32": 4,
        "nonfinite_fp16_tensors": {},
        "rounds": 3,
    }
    assert summary["verified"]["verdict"] == "pass"
    assert capsys.readouterr().out.split() == GELU_FINITE_KEEP  # type: ignore[attr-defined]
    mixed = onnx.load("mixed.onnx")
    rng = np.random.default_rng(5)
    for _ in range(4):  # the spec's range, other samples than the check's
        x = rng.uniform(90, 100, (2, 3)).astype(np.float32)
        assert nonfinite_fp16_tensors(mixed, {"x": x}) == {}
        (got,) = real_fp16_outputs(mixed, {"x": x})
        (want,) = outputs("model.onnx", x)
        np.testing.assert_allclose(got, want, rtol=0.01, atol=0.01)
    assert len(summary["keep_fp32"]) <= autocast_like_fp32_nodes(gelu_overflow(), {"x": x}) == 6
    # the forms a TensorRT user gives the answer in, beside -o
    patterns = [f"^{name}$" for name in GELU_FINITE_KEEP]
    assert Path("mixed.nodes_to_exclude.txt").read_text().split() == patterns == summary["nodes_to_exclude"]
    precisions = ",".join(f"{name}:fp32" for name in GELU_FINITE_KEEP)
    flags = Path("mixed.trtexec.txt").read_text().strip()
    assert flags == summary["trtexec"]
    assert f"--layerPrecisions={precisions}" in flags.split() and "--precisionConstraints=obey" in flags.split()
    assert f"--layerOutputTypes={precisions}" in flags.split()


def test_only_the_node_where_an_inf_starts_moves_to_fp32_not_those_it_flows_through(in_tmp: Path) -> None:
    """The search keeps 4 nodes; h's Cast to fp16 overflows into gelu_div, whose inf flows through
    gelu_scale into Erf. gelu_div moves to fp32 (its h / 4 then fits fp16), gelu_scale does not:
    once its input is finite, so is its output."""
    model = gelu_overflow_scaled_down()
    assert precision(model, "--summary-json", "summary.json", spec=COMPARE_GELU) == 0
    summary = json.loads(Path("summary.json").read_text())
    assert summary["finite"]["added_fp32"] == ["gelu_div"] and summary["finite"]["searched_fp32"] == 4
    assert summary["keep_fp32"] == ["bias_add", "gelu_div", "gelu_mul", "gelu_half", "down_proj"]
    x = np.random.default_rng(5).uniform(90, 100, (2, 3)).astype(np.float32)
    assert nonfinite_fp16_tensors(onnx.load("mixed.onnx"), {"x": x}) == {}


def test_tensorrt_forms_escape_and_count_outputs() -> None:
    """AutoCast takes regular expressions: a name's dots and brackets match only themselves;
    trtexec takes one output type per output of a layer."""
    patterns = autocast_patterns(["/layer.0/Div[1]"])
    assert patterns == [r"^/layer\.0/Div\[1\]$"]
    assert re.fullmatch(patterns[0], "/layer.0/Div[1]") and not re.fullmatch(patterns[0], "/layerX0/Div1")
    flags = trtexec_flags(["split", "a b"], {"split": 2})
    assert shlex.split(flags)[2] == "--layerOutputTypes=split:fp32+fp32,a b:fp32"  # one shell word
    assert trtexec_flags([], {}) == "--fp16"


class _Log:
    def info(self, message: str) -> None:
        pass

    def warning(self, message: str) -> None:
        pass


def _build(spec: CheckSpec, golden: Path | None) -> ModelCheck:
    return build_check(spec, golden)


def test_candidates_are_compared_with_the_fp32_original_never_with_themselves(in_tmp: Path) -> None:
    """onnxconverter-common's node_block_list conversion of the right 4 nodes stores the tensor
    between two kept nodes in fp16 (it has two readers): compared with its own reference run it "passes" (inf == inf);
    the precision check compares it with the fp32 original and fails it."""
    onnx.save(gelu_overflow(), "model.onnx")
    onnx.save(to_fp16(gelu_overflow(), GELU_KEEP), "node_block_list.onnx")
    spec = parse_check_spec(COMPARE_GELU)
    check = SessionCheck(build_check(spec), spec, task="precision")
    workspace = load_workspace(ReduceOptions(model=Path("model.onnx"), work_dir=in_tmp), _Log())
    plan = reference_run(workspace, check, _build, in_tmp / "reference")
    assert plan.check.spec is not None and plan.check.spec.kind == "golden" and plan.check.golden is not None
    itself, _ = check.check.run(Path("node_block_list.onnx"))
    judged, _ = plan.check.check.run(Path("node_block_list.onnx"))
    assert itself.kind is VerdictKind.PASS
    assert judged.kind is VerdictKind.FAIL and judged.signature == "mismatch:nonfinite"
    # the written answer is judged once more: a file that fails is refused, not reported
    session = PrecisionSession.begin(workspace, plan, "auto")
    with pytest.raises(MixedModelFailedError, match="does not pass the check"):
        session.save_mixed(Candidate(frozenset()), in_tmp / "fp16.onnx", verify=plan.check.check)
    answer = Candidate(frozenset(i for i, n in enumerate(workspace.index.nodes) if n.name in GELU_KEEP))
    written = session.save_mixed(answer, in_tmp / "mixed.onnx", verify=plan.check.check)
    assert written.verdict is not None and written.verdict.kind is VerdictKind.PASS
    workspace.close()


def test_inputs_and_outputs_typed_fp16_when_asked(in_tmp: Path) -> None:
    options = ("--io-types", "fp16", "--summary-json", "summary.json")
    assert precision(gelu_overflow(), *options, spec=COMPARE_GELU) == 0
    summary = json.loads(Path("summary.json").read_text())
    assert summary["keep_fp32"] == GELU_FINITE_KEEP and summary["io_types"] == "fp16"
    assert summary["verified"]["verdict"] == "pass"
    mixed = onnx.load("mixed.onnx")
    assert [i.type.tensor_type.elem_type for i in mixed.graph.input] == [TensorProto.FLOAT16]
    assert [o.type.tensor_type.elem_type for o in mixed.graph.output] == [TensorProto.FLOAT16]


def test_an_output_beyond_fp16_cannot_be_typed_fp16(in_tmp: Path, capsys: object) -> None:
    """scale_up's output is a graph output of about 85,000: no fp32 node can hold it in an fp16 output."""
    assert precision(one_node_overflows(), "--io-types", "fp16") == 3
    assert "--io-types fp16" in capsys.readouterr().err  # type: ignore[attr-defined]

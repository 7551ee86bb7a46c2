"""Pass bisection with real onnxruntime checks (``engine.pass_bisect``): every probe is the spec's
check in its isolated child with ``disabled_optimizers`` set at the check's level; the failure is a fusion's
op in the graph onnxruntime optimized and saved (``optimized_model_filepath``)."""

from __future__ import annotations

import math
from pathlib import Path

import onnx
import pytest

from checks.build import build_check
from checks.pass_candidates import applied_transformers, find_candidates
from checks.spec import CheckSpec, CheckSpecError, ModelCheck, parse_check_spec
from engine.pass_bisect import PassBisectError, PassBisection, bisect_passes
from reducer_core.pass_bisect import Outcome, PassCandidate, ProbeRecord
from reducer_core.verdict import VerdictKind
from tests.pass_models import FUSED_MATMUL_FUSION, GELU_FUSION, fusion_model, optimized_op_spec

pytest.importorskip("onnxruntime")


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "fusions.onnx"
    onnx.save(fusion_model(), str(path))
    return path


def test_op_present_with_a_target_looks_into_the_optimized_graph(model: Path) -> None:
    fused = parse_check_spec(optimized_op_spec("FusedMatMul"))
    assert build_check(fused).run(model)[0].kind is VerdictKind.FAIL
    assert build_check(parse_check_spec(optimized_op_spec("FusedMatMul", optimization="basic"))).run(model)[0].kind is (
        VerdictKind.PASS
    )
    assert parse_check_spec("kind: op-present\nops: [FusedMatMul]\n").target is None  # the file, as before


def test_disabled_optimizers_reach_the_session(model: Path) -> None:
    spec = parse_check_spec(
        "kind: op-present\nops: [FusedMatMul]\n"
        f"target: {{runtime: onnxruntime, disabled_optimizers: [{FUSED_MATMUL_FUSION}]}}\n"
    )
    assert spec.target is not None and spec.target.disabled_optimizers == (FUSED_MATMUL_FUSION,)
    assert build_check(spec).run(model)[0].kind is VerdictKind.PASS
    assert "disabled_optimizers" in spec.identity  # another check: another cache key


def test_the_candidates_are_the_transformers_that_changed_the_model(model: Path) -> None:
    found = find_candidates(parse_check_spec(optimized_op_spec("FusedMatMul")), model)
    assert PassCandidate(FUSED_MATMUL_FUSION, "extended") in found
    assert PassCandidate(GELU_FUSION, "extended") in found
    assert PassCandidate("Level1_RuleBasedTransformer", "basic") in found
    assert all(c.name != "ConstantFolding" for c in found)  # applied, changed nothing
    basic = find_candidates(parse_check_spec(optimized_op_spec("FusedMatMul", optimization="basic")), model)
    assert [c.level for c in basic] == ["basic"] * len(basic)


def test_the_log_lines_name_transformer_and_level() -> None:
    log = """x [V:onnxruntime:, ApplyTransformers] Applying 16 graph transformer(s) for level 1
x [I:onnxruntime:, Apply] GraphTransformer ConstantFolding modified: 0 with status: OK
x [I:onnxruntime:, Apply] GraphTransformer Level1_RuleBasedTransformer modified: 1 with status: OK
x Applying 31 graph transformer(s) for level 2
x [I:onnxruntime:, Apply] GraphTransformer GeluFusionL2 modified: 1 with status: OK
x [I:onnxruntime:, Apply] GraphTransformer Level1_RuleBasedTransformer modified: 1 with status: OK
x Applying 1 graph transformer(s) for level 4
x [I:onnxruntime:, Apply] GraphTransformer NhwcTransformer modified: 1 with status: OK
"""
    assert applied_transformers(log) == [
        PassCandidate("Level1_RuleBasedTransformer", "basic"),
        PassCandidate("GeluFusionL2", "extended"),
        PassCandidate("NhwcTransformer", "all"),
    ]


@pytest.mark.parametrize(("op", "fusion"), [("FusedMatMul", FUSED_MATMUL_FUSION), ("Gelu", GELU_FUSION)])
def test_one_fusion_is_named_within_the_bound_and_verified_both_ways(model: Path, op: str, fusion: str) -> None:
    answer = bisect_passes(parse_check_spec(optimized_op_spec(op)), model)
    assert answer.outcome is Outcome.OPTIMIZERS
    assert answer.optimizers == [fusion]
    assert answer.first_failing_level == "extended"
    assert answer.verified
    everything = tuple(sorted(c.name for c in answer.candidates))
    assert (answer.probes[0].role, answer.probes[0].disabled, answer.probes[0].verdict) == (
        "no-optimizer",
        everything,
        "pass",
    )
    fused = [p for p in answer.probes if fusion not in p.disabled and p.verdict == "fail"]
    assert fused and fused[0].signature == f"op-present:{op}"  # on: the fusion's op is there
    passing = [p for p in answer.probes if p.disabled == (fusion,)]
    assert passing and passing[-1].verdict == "pass"  # disabled alone: gone
    candidates = len(answer.candidates)
    assert candidates >= 3
    assert answer.checks <= math.ceil(math.log2(candidates)) + 2 == answer.check_bound  # no-optimizer included


def test_a_failure_needing_no_optimizer_says_so_in_one_check(model: Path) -> None:
    answer = bisect_passes(parse_check_spec(optimized_op_spec("MatMul", "Erf")), model)
    assert answer.outcome is Outcome.NO_OPTIMIZER
    assert answer.checks == 1
    probe = answer.probes[0]
    assert (probe.role, probe.level, probe.verdict) == ("no-optimizer", "all", "fail")
    assert probe.disabled == tuple(sorted(c.name for c in answer.candidates))  # every optimizer that changed it
    assert "needs no optimizer" in answer.message()


def test_a_check_that_passes_with_everything_on_has_nothing_to_bisect(model: Path) -> None:
    answer = bisect_passes(parse_check_spec(optimized_op_spec("LayerNormalization")), model)
    assert answer.outcome is Outcome.NO_FAILURE
    assert "nothing to bisect" in answer.message()


def test_a_spec_without_a_runtime_is_refused_with_what_to_use(model: Path) -> None:
    with pytest.raises(PassBisectError, match="needs a check that runs the model"):
        bisect_passes(parse_check_spec("kind: op-present\nops: [MatMul]\n"), model)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("target: {runtime: onnxruntime, disabled_optimizers: 3}", "target.disabled_optimizers: must be a list"),
        ("target: {runtime: onnxruntime, disabled_optimizers: ['a b']}", "optimizer names are words"),
        ("target: {runtime: tensorrt, disabled_optimizers: [X]}", "only for runtime onnxruntime"),
        ("target: {runtime: tensorrt, disabled_build_options: [CUBLASS]}", "did you mean 'CUBLAS'"),
        ("target: {runtime: onnxruntime, disabled_build_options: [FP16]}", "only for runtime tensorrt"),
    ],
)
def test_bad_disabled_lists_name_the_field(text: str, message: str) -> None:
    with pytest.raises(CheckSpecError, match=message):
        parse_check_spec(f"kind: error\n{text}\n")


def test_op_present_takes_only_an_onnxruntime_target() -> None:
    with pytest.raises(CheckSpecError, match="only runtime onnxruntime saves one"):
        parse_check_spec("kind: op-present\nops: [Gelu]\ntarget: {runtime: tensorrt}\n")


def _bisection(spec: CheckSpec, model: Path, built: list[CheckSpec], heard: list[ProbeRecord]) -> PassBisection:
    def build(probed: CheckSpec) -> ModelCheck:
        built.append(probed)
        return build_check(probed)

    return PassBisection(spec, model, on_probe=heard.append, build=build)


def _asked_and_said(probe: ProbeRecord) -> tuple[object, ...]:
    return probe.role, probe.disabled, probe.level, probe.verdict, probe.signature, probe.reproduces


@pytest.mark.parametrize("died_after", [1, 3])
def test_a_search_rebuilt_from_its_stored_probes_runs_only_the_rest(model: Path, died_after: int) -> None:
    """A worker that dies mid-search (issue 28): the job's stored probes (as ``to_json`` stored
    them) are not checked again, the answer is the uninterrupted search's."""
    spec = parse_check_spec(optimized_op_spec("FusedMatMul"))
    whole = _bisection(spec, model, [], []).run()
    stored = [ProbeRecord.from_json(p.to_json()) for p in whole.probes[:died_after]]
    built: list[CheckSpec] = []
    heard: list[ProbeRecord] = []
    search = _bisection(spec, model, built, heard)
    search.replayed = stored
    answer = search.run()
    assert len(built) == len(heard) == whole.checks - died_after
    assert heard == answer.probes[died_after:]
    assert [_asked_and_said(p) for p in answer.probes] == [_asked_and_said(p) for p in whole.probes]
    assert (answer.outcome, answer.optimizers, answer.verified) == (Outcome.OPTIMIZERS, [FUSED_MATMUL_FUSION], True)


def test_stored_probes_of_another_search_are_checked_again(model: Path) -> None:
    spec = parse_check_spec(optimized_op_spec("FusedMatMul"))
    other = ProbeRecord("no-optimizer", (), "all", "fail", "op-present:FusedMatMul", True)  # not this probe
    built: list[CheckSpec] = []
    search = _bisection(spec, model, built, [])
    search.replayed = [other]
    answer = search.run()
    assert len(built) == answer.checks
    assert answer.probes[0].role == "no-optimizer" and answer.probes[0].verdict == "pass"
    assert answer.optimizers == [FUSED_MATMUL_FUSION]

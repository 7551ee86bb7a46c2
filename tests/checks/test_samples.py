"""A spec check judges every sample of its golden values (issue 22): ``fail_if`` (any, all,
majority) over the samples decides, the verdict's detail names the failing samples, and the
layerwise localisation looks at a failing sample (not just the first one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from bench.samples_bench import input_overflow_chain
from checks.build import build_check
from checks.kinds import layerwise
from checks.spec import parse_check_spec
from checks.user_inputs import complete_samples, golden_from_samples, load_user_samples
from reducer_core.samples import parse_samples_note
from reducer_core.verdict import VerdictKind

SPEC = """\
kind: compare
reference: {runtime: onnxruntime}
target: {runtime: onnxruntime, precision: fp16}
tolerance: {atol: 0.01, rtol: 0.01}
"""
BIG = np.full((1, 8), 100.0, np.float32)
SMALL = np.full((1, 8), 0.5, np.float32)


def _golden(tmp_path: Path, values: list[np.ndarray]) -> Path:
    model = input_overflow_chain()
    onnx.save(model, str(tmp_path / "model.onnx"))
    paths = []
    for i, value in enumerate(values):
        np.savez(tmp_path / f"s{i}.npz", x=value)
        paths.append(tmp_path / f"s{i}.npz")
    loaded = load_user_samples(paths, model)
    samples = complete_samples(model, loaded, 1, 0.0, 1.0)
    return golden_from_samples(tmp_path / "model.onnx", tmp_path / "inputs.golden", samples)


@pytest.mark.parametrize(
    ("fail_if", "values", "kind", "failing"),
    [
        ("any", [SMALL, BIG, SMALL], VerdictKind.FAIL, (1,)),
        ("all", [SMALL, BIG, SMALL], VerdictKind.PASS, (1,)),
        ("all", [BIG, BIG], VerdictKind.FAIL, (0, 1)),
        ("majority", [BIG, SMALL, BIG], VerdictKind.FAIL, (0, 2)),
        ("majority", [BIG, SMALL, SMALL], VerdictKind.PASS, (0,)),
        ("any", [SMALL, SMALL], VerdictKind.PASS, ()),
    ],
)
def test_fail_if_over_the_samples_decides_and_the_detail_names_them(
    tmp_path: Path, fail_if: str, values: list[np.ndarray], kind: VerdictKind, failing: tuple[int, ...]
) -> None:
    golden = _golden(tmp_path, values)
    check = build_check(parse_check_spec(SPEC + f"fail_if: {fail_if}\n"), golden=golden)

    verdict, _ = check.run(tmp_path / "model.onnx")

    assert verdict.kind is kind, verdict
    report = parse_samples_note(verdict.detail)
    assert report is not None and report.judged == len(values) and report.failing == failing
    if kind is VerdictKind.FAIL:
        assert verdict.signature == "mismatch:nonfinite"


def test_layerwise_localises_in_a_failing_sample(tmp_path: Path) -> None:
    golden = _golden(tmp_path, [SMALL, SMALL, BIG])
    spec = parse_check_spec(SPEC)

    result = layerwise({"spec": spec.to_json(), "model": str(tmp_path / "model.onnx"), "golden": str(golden)})

    assert result["kind"] == "fail"
    assert "in sample 2" in result["detail"]
    assert result["output"].splitlines()[0] == "nonfinite\tt15"

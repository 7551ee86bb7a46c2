"""The reference guide's overflow case: an intermediate value above fp16's range, reduced with the
issue's compare fp32-vs-fp16 spec, with and without golden boundary inputs."""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from checks.build import build_check
from checks.spec import parse_check_spec
from reducer_core.verdict import VerdictKind
from tests.checks.conftest import COMPARE_FP16, cli
from tests.checks.models import lossy_overflow_model, overflow_model


def _reduce(tmp_path: Path, *extra: str) -> dict[str, object]:
    onnx.save(overflow_model(), str(tmp_path / "model.onnx"))
    (tmp_path / "spec.yaml").write_text(COMPARE_FP16)
    args = ["reduce", "model.onnx", "-o", "min.onnx", "--check-spec", "spec.yaml", "--summary-json", "s.json"]
    # --no-reduce-data: these tests count the checks of localisation (smaller inputs: tests/cli/test_cli_data.py)
    proc = cli(*args, "--no-progress", "--no-reduce-data", *extra, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary: dict[str, object] = json.loads((tmp_path / "s.json").read_text())
    return summary


def _golden(tmp_path: Path) -> None:
    onnx.save(overflow_model(), str(tmp_path / "model.onnx"))
    proc = cli("golden", "model.onnx", "-o", "model.golden", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_golden_inputs_reduce_to_exactly_the_overflowing_node_by_localisation(tmp_path: Path) -> None:
    _golden(tmp_path)
    summary = _reduce(tmp_path, "--golden", "model.golden")
    assert summary["min_bad_nodes"] == ["Mul:overflow"]
    assert summary["original"]["signature"] == "mismatch:nonfinite"  # type: ignore[index]
    assert summary["localization"]["path"] == "layerwise"  # type: ignore[index]
    assert summary["checks_run"] == 3  # original, layerwise run, the node alone
    assert [n.name for n in onnx.load(str(tmp_path / "min.onnx")).graph.node] == ["overflow"]


def test_a_run_settled_by_localisation_writes_the_closest_passing_model_too(tmp_path: Path) -> None:
    """--min-good after localisation: the overflowing node's producer without it, checked once and
    passing (it was "no passing model ... seen; --min-good not written" before)."""
    _golden(tmp_path)
    summary = _reduce(tmp_path, "--golden", "model.golden", "--min-good", "good.onnx")
    assert summary["localization"]["path"] == "layerwise"  # type: ignore[index]
    assert summary["min_bad_nodes"] == ["Mul:overflow"]
    assert [it["phase"] for it in summary["iterations"]] == ["original", "localize", "min-good"]  # type: ignore[union-attr]
    assert [it["verdict"] for it in summary["iterations"]] == ["fail", "fail", "pass"]  # type: ignore[union-attr]
    assert summary["checks_run"] == 4  # original, layerwise run, the node alone, its producer alone
    assert summary["min_good_nodes"] == 1
    assert [n.name for n in onnx.load(str(tmp_path / "good.onnx")).graph.node] == ["scale_up"]
    spec = parse_check_spec(COMPARE_FP16)
    verdict, _ = build_check(spec, golden=tmp_path / "model.golden").run(tmp_path / "good.onnx")
    assert verdict.kind is VerdictKind.PASS


def test_a_localised_run_whose_neighbours_fail_too_writes_the_nodes_before_the_first_mismatch(
    tmp_path: Path,
) -> None:
    """As on real exports: the overflowing node's producer alone is off by more than the tolerance
    in fp16 and its reader gets the overflowing tensor, so both neighbours fail (the run reported
    "min-good: none found" and wrote no --min-good before). The third probe, every node before the
    first mismatching tensor, passes: written, and it passes the same spec on its own."""
    onnx.save(lossy_overflow_model(), str(tmp_path / "model.onnx"))
    (tmp_path / "spec.yaml").write_text(COMPARE_FP16)
    assert cli("golden", "model.onnx", "-o", "model.golden", cwd=tmp_path).returncode == 0
    args = ["reduce", "model.onnx", "-o", "min.onnx", "--check-spec", "spec.yaml", "--golden", "model.golden"]
    proc = cli(*args, "--min-good", "good.onnx", "--summary-json", "s.json", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["localization"]["path"] == "layerwise"
    assert summary["min_bad_nodes"] == ["Mul:overflow"]
    probes = [it for it in summary["iterations"] if it["phase"] == "min-good"]
    assert [it["verdict"] for it in probes] == ["fail", "fail", "pass"]
    assert summary["min_good_nodes"] == 3
    assert [n.name for n in onnx.load(str(tmp_path / "good.onnx")).graph.node] == ["relu_in", "widen", "offset"]
    spec = parse_check_spec(COMPARE_FP16)
    verdict, _ = build_check(spec, golden=tmp_path / "model.golden").run(tmp_path / "good.onnx")
    assert verdict.kind is VerdictKind.PASS
    bad, _ = build_check(spec, golden=tmp_path / "model.golden").run(tmp_path / "min.onnx")
    assert bad.kind is VerdictKind.FAIL


def test_golden_inputs_reduce_to_exactly_the_overflowing_node_by_reduction(tmp_path: Path) -> None:
    _golden(tmp_path)
    summary = _reduce(tmp_path, "--golden", "model.golden", "--no-localize")
    assert summary["min_bad_nodes"] == ["Mul:overflow"]
    assert summary["localization"]["path"] == "reduction"  # type: ignore[index]


def test_fresh_random_inputs_miss_the_overflow_that_golden_inputs_catch(tmp_path: Path) -> None:
    summary = _reduce(tmp_path)
    # Without golden values the lone node gets inputs in [0, 1) and stays in range: localisation
    # falls back, and reduction must keep the upstream scaling node to reproduce the overflow.
    assert summary["localization"]["path"] == "reduction"  # type: ignore[index]
    assert summary["min_bad_nodes"] == ["Mul:scale_up", "Mul:overflow"]

    _golden(tmp_path)
    lone = onnx.load(str(tmp_path / "min.onnx"))
    del lone.graph.node[0]  # keep only the overflowing Mul: its input 's' becomes a graph input
    lone.graph.input[0].name = "s"
    onnx.save(lone, str(tmp_path / "lone.onnx"))
    spec = parse_check_spec(COMPARE_FP16)
    fresh, _ = build_check(spec).run(tmp_path / "lone.onnx")
    golden, _ = build_check(spec, golden=tmp_path / "model.golden").run(tmp_path / "lone.onnx")
    assert fresh.kind is VerdictKind.PASS
    assert golden.kind is VerdictKind.FAIL and golden.signature == "mismatch:nonfinite"
    assert "p" in golden.detail


def test_signature_pinning_rejects_a_candidate_that_fails_differently(tmp_path: Path) -> None:
    """With a tight rtol, fp16 rounding alone fails too ('mismatch:tolerance'); the original fails
    by overflow ('mismatch:nonfinite'). Pinned, those candidates do not count."""
    _golden(tmp_path)
    tight = COMPARE_FP16.replace("rtol: 0.001", "rtol: 0.00001")
    (tmp_path / "spec.yaml").write_text(tight)
    args = ["reduce", "model.onnx", "-o", "min.onnx", "--check-spec", "spec.yaml", "--summary-json", "s.json"]
    proc = cli(*args, "--golden", "model.golden", "--no-localize", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["min_bad_nodes"] == ["Mul:overflow"]
    rejected = [it for it in summary["iterations"] if it["verdict"] == "fail" and not it["reproduces"]]
    assert rejected, "some candidate failed with mismatch:tolerance and was not counted"

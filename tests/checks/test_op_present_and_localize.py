from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from bench.control_flow_zoo import loop_model
from examples.build_example_model import build_example_model
from tests.checks.conftest import COMPARE_FP16, OP_PRESENT_MUL, cli
from tests.checks.models import chain_model


def test_op_present_simulation_of_the_reference_example_gives_the_single_mul(tmp_path: Path) -> None:
    onnx.save(build_example_model(), str(tmp_path / "model.onnx"))
    (tmp_path / "spec.yaml").write_text(OP_PRESENT_MUL)
    proc = cli(
        "reduce",
        "model.onnx",
        "-o",
        "min.onnx",
        "--check-spec",
        "spec.yaml",
        "--summary-json",
        "s.json",
        "--no-progress",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["min_bad_nodes"] == ["Mul:onnx_graphsurgeon_node_5"]
    assert summary["original"]["signature"] == "op-present:Mul"
    assert summary["localization"]["path"] == "reduction"
    assert [n.op_type for n in onnx.load(str(tmp_path / "min.onnx")).graph.node] == ["Mul"]


def test_check_spec_and_check_are_mutually_exclusive(tmp_path: Path) -> None:
    onnx.save(build_example_model(), str(tmp_path / "model.onnx"))
    (tmp_path / "spec.yaml").write_text(OP_PRESENT_MUL)
    proc = cli("reduce", "model.onnx", "-o", "m.onnx", "--check-spec", "spec.yaml", "--check", "true", cwd=tmp_path)
    assert proc.returncode == 2
    assert "either --check-spec" in proc.stderr
    (tmp_path / "bad.yaml").write_text("kind: compare\ntarget: {precision: fp16}\ntolerance: {atol: abc}")
    proc = cli("reduce", "model.onnx", "-o", "m.onnx", "--check-spec", "bad.yaml", cwd=tmp_path)
    assert proc.returncode == 2
    assert "tolerance.atol: must be a number >= 0, got 'abc'" in proc.stderr


def _checks(tmp_path: Path, *extra: str) -> dict[str, object]:
    args = ["reduce", "model.onnx", "-o", "min.onnx", "--check-spec", "spec.yaml", "--golden", "model.golden"]
    # --no-reduce-data: these tests count the checks of localisation (smaller inputs: tests/cli/test_cli_data.py)
    proc = cli(*args, "--summary-json", "s.json", "--no-progress", "--no-reduce-data", *extra, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary: dict[str, object] = json.loads((tmp_path / "s.json").read_text())
    return summary


def test_localisation_finds_the_planted_fault_in_a_long_chain_with_far_fewer_checks(tmp_path: Path) -> None:
    onnx.save(chain_model(40, fault_at=23, residual_every=5), str(tmp_path / "model.onnx"))
    (tmp_path / "spec.yaml").write_text(COMPARE_FP16)
    assert cli("golden", "model.onnx", "-o", "model.golden", cwd=tmp_path).returncode == 0
    localized = _checks(tmp_path)
    reduced = _checks(tmp_path, "--no-localize")
    assert localized["localization"]["path"] == "layerwise"  # type: ignore[index]
    assert localized["min_bad_nodes"] == ["Mul:n23_overflow"]
    assert reduced["min_bad_nodes"] == ["Mul:n23_overflow"]
    assert localized["checks_run"] == 3
    assert int(reduced["checks_run"]) > 3  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("spec", "signature"), [("ops: [Erf]", "op-present:Erf"), ("names: [body/culprit]", "op-present:body/culprit")]
)
def test_op_present_sees_an_op_inside_a_loop_body_and_the_body_is_reduced(
    tmp_path: Path, spec: str, signature: str
) -> None:
    """The culprit lives only in the Loop's body (before: "the original model did not fail"): the
    built-in check finds it there, and body reduction extracts it out of the Loop."""
    model = loop_model()
    onnx.save(model, str(tmp_path / "model.onnx"))
    (tmp_path / "spec.yaml").write_text(f"kind: op-present\n{spec}\n")
    args = ["reduce", "model.onnx", "-o", "min.onnx", "--check-spec", "spec.yaml", "--summary-json", "s.json"]
    proc = cli(*args, "--no-progress", "--no-reduce-data", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["original"]["signature"] == signature
    assert summary["min_bad_nodes"] == ["Erf:body/culprit (out of Loop:loop's body)"]
    assert (summary["nodes_before"], summary["nodes_after"]) == (34, 1)
    assert [n.op_type for n in onnx.load(str(tmp_path / "min.onnx")).graph.node] == ["Erf"]

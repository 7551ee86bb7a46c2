"""Per-tensor errors of the layerwise run (issue 20, item 13: the page's error overlay): every
compared tensor's largest absolute and relative error, non-finite values said by a flag (JSON has
no inf), bounded in count, carried to ``--summary-json`` as ``node_errors``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import onnx

from checks.kinds import layerwise
from checks.spec import parse_check_spec
from reducer_core.localization import TensorError, TensorErrors
from tests.checks.conftest import COMPARE_FP16, cli
from tests.checks.models import chain_model

FAULT_AT = 23


def _by_tensor(errors: dict[str, object]) -> dict[str, dict[str, object]]:
    tensors = errors["tensors"]
    assert isinstance(tensors, list)
    return {str(e["tensor"]): e for e in tensors}


def _check_chain_errors(errors: dict[str, object], length: int) -> None:
    """The culprit (the overflowing Mul's output) is the first non-finite tensor; every tensor
    before it is finite, measured (a number, not null) and small (fp16 rounding, which adds up
    along the chain: some are beyond this spec's tight tolerance)."""
    by_tensor = _by_tensor(errors)
    order = [str(e["tensor"]) for e in errors["tensors"]]  # type: ignore[union-attr]
    assert errors["total"] == len(order) == length + 1  # t0..t{length-1} and y
    assert errors["truncated"] is False
    first_bad = next(name for name in order if by_tensor[name]["nonfinite"])
    assert first_bad == f"t{FAULT_AT}"
    culprit = by_tensor[first_bad]
    assert culprit["node"] == f"n{FAULT_AT}_overflow" and culprit["op"] == "Mul"
    assert culprit["beyond"] is True and culprit["max_abs"] is None and culprit["max_rel"] is None
    for name in order[: order.index(first_bad)]:
        entry = by_tensor[name]
        assert entry["nonfinite"] is False, entry
        assert isinstance(entry["max_abs"], float) and isinstance(entry["max_rel"], float), entry
        assert 0.0 < entry["max_rel"] < 0.01, entry  # type: ignore[operator]
    # fp16 rounding is measured, not zero: the node scaling by 400 just before the culprit
    assert by_tensor[f"t{FAULT_AT - 1}"]["max_abs"] > 0.0  # type: ignore[operator]


def test_the_layerwise_run_records_every_tensors_error_with_the_culprit_non_finite(tmp_path: Path) -> None:
    onnx.save(chain_model(40, fault_at=FAULT_AT), str(tmp_path / "model.onnx"))
    spec = parse_check_spec(COMPARE_FP16)
    path = tmp_path / "errors.json"
    payload = {"spec": spec.to_json(), "model": str(tmp_path / "model.onnx"), "golden": None, "errors": str(path)}

    result = layerwise(payload)

    assert result["kind"] == "fail"
    assert f"nonfinite\tt{FAULT_AT}" in result["output"].splitlines()
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text  # strict JSON
    _check_chain_errors(json.loads(text), 40)


def test_errors_are_bounded_to_the_worst_in_node_order_and_rounded() -> None:
    errors = [TensorError(f"t{i}", f"n{i}", "Add", 1e-5 * i + 1.23456789e-9, 1e-4 * i) for i in range(10)]
    errors[3] = TensorError("t3", "n3", "Mul", None, None, nonfinite=True, beyond=True)

    kept = TensorErrors.bounded(0, errors, limit=4)

    assert kept.total == 10 and kept.truncated
    assert [e.tensor for e in kept.tensors] == ["t3", "t7", "t8", "t9"]  # the non-finite one, then the largest
    assert kept.tensors[1].max_abs == 7.000e-05  # 4 significant digits
    data = json.loads(json.dumps(kept.to_json(), allow_nan=False))
    assert TensorErrors.from_json(data) == kept
    assert math.isclose(TensorErrors.from_json(data).tensors[3].max_rel or 0.0, 9e-4)


def test_summary_json_carries_the_node_errors_of_the_localisation_step(tmp_path: Path) -> None:
    onnx.save(chain_model(40, fault_at=FAULT_AT), str(tmp_path / "model.onnx"))
    (tmp_path / "spec.yaml").write_text(COMPARE_FP16)
    args = ["reduce", "model.onnx", "-o", "min.onnx", "--check-spec", "spec.yaml", "--summary-json", "s.json"]

    proc = cli(*args, "--no-progress", "--no-reduce-data", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["localization"] is not None  # the flowchart ran its layerwise step
    _check_chain_errors(summary["node_errors"], 40)

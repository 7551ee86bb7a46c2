from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from polygraphy.json import save_json

from checks.build import build_check
from checks.golden import GoldenStore, GoldenWriter, write_golden
from checks.spec import parse_check_spec
from reducer_core.verdict import VerdictKind
from tests.checks.conftest import COMPARE_FP16, cli
from tests.checks.models import chain_model, overflow_model


def test_golden_command_stores_inputs_and_every_tensor_for_several_samples(tmp_path: Path) -> None:
    onnx.save(overflow_model(), str(tmp_path / "model.onnx"))
    proc = cli("golden", "model.onnx", "-o", "g.golden", "--samples", "3", "--seed", "7", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    store = GoldenStore.open(tmp_path / "g.golden")
    assert store.samples == 3
    assert set(store.names(2)) == {"x", "r0", "s", "p", "q", "a", "y"}
    for i in range(3):
        x = store.read(i, "x")
        np.testing.assert_allclose(store.read(i, "p"), np.maximum(x, 0) * 400 * 200, rtol=1e-6)
    assert not np.array_equal(store.read(0, "x"), store.read(1, "x"))


def test_polygraphy_json_inputs_feed_the_golden_command_and_checks(tmp_path: Path) -> None:
    """Data written by the real Polygraphy library: a list of feed dicts (--save-inputs), and the
    same plus layerwise values (what `polygraphy data to-input` produces) used directly as --golden."""
    onnx.save(overflow_model(), str(tmp_path / "model.onnx"))
    x = np.full((1, 16), 0.9, dtype=np.float32)
    save_json([{"x": x}], str(tmp_path / "inputs.json"))
    proc = cli("golden", "model.onnx", "-o", "g.golden", "--load-inputs", "inputs.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    store = GoldenStore.open(tmp_path / "g.golden")
    np.testing.assert_array_equal(store.read(0, "x"), x)
    s = (x * 400).astype(np.float32)
    save_json([{"x": x, "s": s, "p": s * 200}], str(tmp_path / "layerwise_inputs.json"))
    lone = onnx.helper.make_graph(
        [onnx.helper.make_node("Mul", ["s", "k200"], ["p"])],
        "lone",
        [onnx.helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, [1, 16])],
        [onnx.helper.make_tensor_value_info("p", onnx.TensorProto.FLOAT, [1, 16])],
        initializer=[onnx.numpy_helper.from_array(np.array(200.0, dtype=np.float32), "k200")],
    )
    model = onnx.helper.make_model(lone, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "lone.onnx"))
    compare = parse_check_spec(COMPARE_FP16)
    verdict, _ = build_check(compare, golden=tmp_path / "layerwise_inputs.json").run(tmp_path / "lone.onnx")
    assert verdict.kind is VerdictKind.FAIL and verdict.signature == "mismatch:nonfinite"
    golden_kind = parse_check_spec("kind: golden\ntarget: {precision: fp16}\ntolerance: {atol: 0.001, rtol: 0.001}")
    verdict, _ = build_check(golden_kind, golden=tmp_path / "layerwise_inputs.json").run(tmp_path / "lone.onnx")
    assert verdict.kind is VerdictKind.FAIL and verdict.signature == "mismatch:nonfinite"


def test_golden_generation_runs_in_chunks_under_a_byte_budget(tmp_path: Path) -> None:
    onnx.save(chain_model(20, fault_at=10, width=1024), str(tmp_path / "model.onnx"))
    sample = {"x": np.random.default_rng(0).uniform(0, 1, (1, 1024)).astype(np.float32)}
    tensors, runs = write_golden(tmp_path / "model.onnx", tmp_path / "g.golden", [sample], chunk_bytes=4096 * 4)
    assert tensors == 22 and runs == 6  # 21 tensors of 4 KiB, 4 per run, plus the input
    store = GoldenStore.open(tmp_path / "g.golden")
    assert len(store.sample(0)) == 22


@pytest.mark.slow
def test_a_golden_file_larger_than_memory_allows_is_written_and_read_one_tensor_at_a_time(tmp_path: Path) -> None:
    """6 tensors of 128 MiB (768 MiB in all): writing and reading each stay under ~2 tensors of
    Python-allocated memory, so a file far larger than memory works the same way."""
    size = 128 * 1024 * 1024 // 4
    path = tmp_path / "big.golden"
    tracemalloc.start()
    with GoldenWriter(path) as writer:
        for i in range(6):
            writer.add(0, f"t{i}", np.full(size, float(i), dtype=np.float32))
    _, write_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    store = GoldenStore.open(path)
    for i in range(6):
        value = store.read(0, f"t{i}")
        assert value.shape == (size,) and value[-1] == float(i)
        del value
    _, read_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    store.close()
    tensor_bytes = size * 4
    assert path.stat().st_size > 6 * tensor_bytes
    assert write_peak < 2 * tensor_bytes
    assert read_peak < 2 * tensor_bytes

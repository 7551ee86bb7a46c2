"""The mixed-precision converter (``checks.fp16_model.to_mixed``) and fp16 storage made real on
onnxruntime's CPU provider (``storage_real``), on models built here: the BERT failure mode (a
tensor between two kept nodes with two readers), ops whose slots must keep their types, and
graph inputs and outputs typed as asked."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from bench.precision_bert import bert_like
from checks.fp16_model import MIXED_KEY, is_mixed, storage_real, to_mixed
from checks.ort_runtime import random_inputs
from tests.models import IR_VERSION, OPSET
from tests.precision_models import GELU_KEEP, gelu_overflow, real_fp16_outputs

FLOAT, HALF = TensorProto.FLOAT, TensorProto.FLOAT16
X = np.random.default_rng(0).uniform(90, 100, (2, 3)).astype(np.float32)


def fp32_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feeds)]


def types_of(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    graph = inferred.graph
    found = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.input, *graph.output]}
    return found | {t.name: t.data_type for t in graph.initializer}


def test_a_tensor_between_two_kept_nodes_stays_fp32_whatever_its_readers() -> None:
    """``h`` (bias_add -> kept gelu_mul and fp16 gelu_div) holds about 137,000: stored fp32, the
    written model is finite with real fp16 storage and computes what the fp32 model does."""
    mixed = to_mixed(gelu_overflow(), GELU_KEEP)
    model = mixed.model
    onnx.checker.check_model(model, full_check=True)
    types = types_of(model)
    assert types["h"] == FLOAT and types["m"] == FLOAT and types["g"] == FLOAT
    assert types["u"] == HALF and types["d"] == HALF and types["e"] == HALF and types["up_w"] == HALF
    assert types["h__to_fp16"] == HALF  # the fp16 reader's copy
    assert "h" in mixed.fp32_tensors and list(mixed.fp32_nodes) == GELU_KEEP
    (got,) = real_fp16_outputs(model, {"x": X})
    (want,) = fp32_outputs(gelu_overflow(), {"x": X})
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=0.01)
    # it loads and runs as written (onnxruntime's CPU provider, default optimisations)
    (plain,) = fp32_outputs(model, {"x": X})
    np.testing.assert_allclose(plain, want, rtol=0.01)


def test_casts_only_where_a_tensor_crosses_between_fp16_and_fp32() -> None:
    model = to_mixed(gelu_overflow(), GELU_KEEP).model
    types = types_of(model)
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    produced_by_cast = {n.output[0] for n in casts}
    for cast in casts:
        assert types[cast.input[0]] != types[cast.output[0]], cast  # a real crossing
        assert cast.input[0] not in produced_by_cast  # never a Cast of a Cast
    # x in, u into kept bias_add, h into fp16 gelu_div, e1 into kept gelu_mul, y into fp16 Relu, z out
    assert len(casts) == 6


def test_overflow_that_the_cpu_provider_hides_shows_with_fp16_storage_made_real() -> None:
    """The plain fp16 model: onnxruntime's CPU provider computes it in fp32 and gives finite values;
    with every fp16 tensor rounded through fp16 the overflow is inf, as on a GPU."""
    model = to_mixed(gelu_overflow(), []).model
    assert is_mixed(model)
    (hidden,) = fp32_outputs(model, {"x": X})
    (real,) = real_fp16_outputs(model, {"x": X})
    assert np.isfinite(hidden).all()
    assert not np.isfinite(real).any()


def test_a_kept_set_one_node_short_overflows() -> None:
    (real,) = real_fp16_outputs(to_mixed(gelu_overflow(), GELU_KEEP[:-1]).model, {"x": X})
    assert not np.isfinite(real).any()


def _typed_ops_model() -> onnx.ModelProto:
    """Slots that must keep their types: shapes and indices (int64), Resize's scales (float
    only), LayerNormalization's Mean (float only), Constant and ConstantOfShape values, a Cast to
    float, a weight read by an fp16 node and a kept fp32 node."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [1, 2, 3])
    scales = helper.make_tensor("scales", FLOAT, [3], [1.0, 1.0, 2.0])
    gamma = numpy_helper.from_array(np.ones(3, np.float32), "gamma")
    beta = numpy_helper.from_array(np.zeros(6, np.float32), "beta")
    nodes = [
        helper.make_node("Constant", [], ["c"], name="const", value=helper.make_tensor("v", FLOAT, [], [2.0])),
        helper.make_node("Mul", ["x", "c"], ["a"], name="scale"),
        helper.make_node("Reshape", ["a", "shape"], ["r"], name="reshape"),
        helper.make_node("LayerNormalization", ["r", "gamma"], ["n", "mean"], name="norm", axis=-1),
        helper.make_node("Resize", ["n", "", "scales"], ["up"], name="resize", mode="nearest"),
        helper.make_node("Shape", ["up"], ["s"], name="shape_of"),
        helper.make_node("ConstantOfShape", ["s"], ["zeros"], name="zeros_like"),
        helper.make_node("Add", ["up", "zeros"], ["b"], name="add_zeros"),
        helper.make_node("Add", ["b", "beta"], ["bb"], name="add_beta"),
        helper.make_node("Add", ["bb", "beta"], ["y"], name="kept_add"),
        helper.make_node("Cast", ["s"], ["sf"], name="shape_as_float", to=FLOAT),
        helper.make_node("ReduceSum", ["sf"], ["total"], name="total", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "typed",
        [helper.make_tensor_value_info("x", FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("y", FLOAT, [1, 2, 6]),
            helper.make_tensor_value_info("mean", FLOAT, [1, 2, 1]),
            helper.make_tensor_value_info("total", FLOAT, []),
        ],
        initializer=[shape, scales, gamma, beta],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def test_slots_with_fixed_types_keep_them_and_the_model_checks_and_runs() -> None:
    original = _typed_ops_model()
    mixed = to_mixed(original, ["kept_add"])
    model = mixed.model
    onnx.checker.check_model(model, full_check=True)
    types = types_of(model)
    assert types["shape"] == TensorProto.INT64 and types["s"] == TensorProto.INT64
    assert types["scales"] == FLOAT  # Resize's scales are tensor(float) only
    assert types["mean"] == FLOAT  # LayerNormalization's Mean is float only
    assert types["c"] == HALF and types["zeros"] == HALF and types["sf"] == HALF and types["up"] == HALF
    assert types["beta"] == FLOAT and types["beta__to_fp16"] == HALF  # read by fp16 add_beta and kept kept_add
    assert types["y"] == FLOAT and types["total"] == FLOAT  # outputs typed as the original's
    assert [e.key for e in model.metadata_props] == [MIXED_KEY]
    x = np.random.default_rng(1).uniform(-1, 1, (2, 3)).astype(np.float32)
    for got, want in zip(real_fp16_outputs(model, {"x": x}), fp32_outputs(original, {"x": x}), strict=True):
        np.testing.assert_allclose(got, want, rtol=0.01, atol=0.01)
    for got, want in zip(fp32_outputs(model, {"x": x}), fp32_outputs(original, {"x": x}), strict=True):
        np.testing.assert_allclose(got, want, rtol=0.01, atol=0.01)


def test_inputs_and_outputs_typed_fp16_when_asked() -> None:
    model = to_mixed(gelu_overflow(), GELU_KEEP, io="fp16").model
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.input[0].type.tensor_type.elem_type == HALF
    assert model.graph.output[0].type.tensor_type.elem_type == HALF
    (want,) = fp32_outputs(gelu_overflow(), {"x": X})
    (got,) = fp32_outputs(model, {"x": X.astype(np.float16)})  # as written: fp16 in, fp16 out
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=0.01)
    (real,) = real_fp16_outputs(model, {"x": X.astype(np.float16).astype(np.float32)})  # fp32 storage of fp16
    np.testing.assert_allclose(real, want, rtol=0.01)


def test_storage_real_rounds_every_fp16_tensor_and_keeps_fp32_ones() -> None:
    real = storage_real(to_mixed(gelu_overflow(), GELU_KEEP).model)
    onnx.checker.check_model(real, full_check=True)
    assert all(t.data_type != HALF for t in real.graph.initializer)
    stores = {n.input[0] for n in real.graph.node if n.name.endswith("_store")}
    assert "u__exact" in stores and "e__exact" in stores  # fp16 tensors written rounded
    assert not {"h__exact", "m__exact", "g__exact"} & stores  # fp32 ones as they are


def test_a_bert_like_encoder_converts_to_a_file_that_checks_loads_and_is_finite() -> None:
    """The bench's BERT-like encoder (bench/precision_bert.py): embeddings (Gather of int64 ids),
    a mask from Shape/ConstantOfShape, Reshape/Transpose with int64 shapes, Softmax,
    LayerNormalization, and a graph output that the pooler reads too (where onnxconverter-common's
    conversion declares fp32 and writes fp16)."""
    original = bert_like()
    keep = ["layer1.ffn.up.bias_add", "layer1.gelu.mul", "layer1.gelu.half", "layer1.ffn.down.matmul"]
    mixed = to_mixed(original, keep)
    onnx.checker.check_model(mixed.model, full_check=True)
    assert list(mixed.fp32_nodes) == keep
    feeds = random_inputs(original, 1, 0, 999)
    want = fp32_outputs(original, feeds)
    for got in (fp32_outputs(mixed.model, feeds), real_fp16_outputs(mixed.model, feeds)):
        for value, reference in zip(got, want, strict=True):
            assert np.isfinite(value).all()
            np.testing.assert_allclose(value, reference, atol=0.02, rtol=0.02)
    (plain, _) = real_fp16_outputs(to_mixed(original, []).model, feeds)
    assert not np.isfinite(plain).all()  # the plain fp16 model overflows

"""The precision bench's ResNet-like and GPT-2-like models (built here, nothing downloaded), and
the small graph builder they share with ``precision_bert.bert_like``.

``resnet_like``: a CIFAR-style ResNet (Caffe-style input: pixels minus the mean, in [-128, 128],
so the stem convolution writes a few hundred to a few thousand, as such exports do), 3 stages of
2 basic blocks (Conv, BatchNormalization, Relu, residual Add; a strided 1x1 Conv + BatchNorm on
the shortcut where the shape changes), GlobalAveragePool, Flatten, Gemm: 10 classes. The planted
overflow: the last block's second BatchNorm has a dead channel pair (running variance 0, so it
divides by sqrt(eps)) writing about 90,000, carried by the residual Add, Relu, GlobalAveragePool
and Flatten into the classifier (whose weights for those channels are tiny).

``gpt2_like``: a 2-layer GPT-2 decoder (token and position embeddings, pre-LayerNormalization,
fused QKV projection split in three, 4-head attention with GPT-2's causal mask: ``Where(mask,
scores, -10000)`` over a constant lower-triangular mask, tanh GELU ``0.5 x (1 + tanh(sqrt(2/pi)
(x + 0.044715 x^3)))`` with ``Pow``, a final LayerNorm and a tied LM head). Planted large
activations: layer 0's MLP has 8 channels whose pre-activation is about 20 (x^3 about 8,000: in
fp16's range) and layer 1's 4 channels about 48 (x^3 about 110,000: beyond it, and Tanh(inf) = 1
hides it on a CPU); layer 1's MLP output writes about 100,000 into 2 channels of the residual
stream (a "massive activation": the down-projection's weights from the 4 channels, about 520,
make it), which the final LayerNorm reads: in fp16 it reads inf and writes NaN.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from checks.ort_runtime import random_inputs

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


class Graph:
    """Nodes and initializers of a model being built, with a seeded generator for weights."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def w(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def rand(self, name: str, shape: tuple[int, ...], scale: float) -> str:
        return self.w(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op: str, name: str, inputs: list[str], **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(self, name: str, x: str, n_in: int, n_out: int, bias: np.ndarray | None = None) -> str:
        return self.linear_with(name, x, self.weight(n_in, n_out), bias)

    def linear_with(self, name: str, x: str, weight: np.ndarray, bias: np.ndarray | None = None) -> str:
        w = self.w(f"{name}.weight", weight)
        b = self.w(f"{name}.bias", bias if bias is not None else np.zeros(weight.shape[1], np.float32))
        return self.op("Add", f"{name}.bias_add", [self.op("MatMul", f"{name}.matmul", [x, w]), b])

    def weight(self, n_in: int, n_out: int) -> np.ndarray:
        """A ``(n_in, n_out)`` matrix of standard normals scaled by ``1 / sqrt(n_in)``."""
        scale = 1.0 / np.sqrt(n_in)
        value: np.ndarray = (self.rng.standard_normal((n_in, n_out)) * scale).astype(np.float32)
        return value

    def layer_norm(self, name: str, x: str, width: int) -> str:
        gamma = self.w(f"{name}.gamma", np.ones(width, np.float32))
        beta = self.w(f"{name}.beta", np.zeros(width, np.float32))
        return self.op("LayerNormalization", name, [x, gamma, beta], axis=-1, epsilon=1e-5)

    def model(
        self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def all_values(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor of ``model`` (fp32 inputs), graph optimisations off."""
    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    names = {o.name for o in marked.graph.output}
    for node in marked.graph.node:
        marked.graph.output.extend(onnx.ValueInfoProto(name=o) for o in node.output if o and o not in names)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(marked.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return {o.name: np.asarray(v) for o, v in zip(session.get_outputs(), session.run(None, feeds), strict=True)}


# --- ResNet-like ----------------------------------------------------------------------------------

IMAGE, CLASSES = 32, 10
RESNET_WIDTHS = (16, 32, 64)
RESNET_INPUT_RANGE = (-128.0, 128.0)
DEAD_CHANNELS, DEAD_BN = 2, "layer3.1.bn2"


def _conv(g: Graph, name: str, x: str, c_in: int, c_out: int, kernel: int, stride: int, scale: float = 1.0) -> str:
    fan_in = c_in * kernel * kernel
    weight = g.rand(f"{name}.weight", (c_out, c_in, kernel, kernel), scale * np.sqrt(2.0 / fan_in))
    pad = kernel // 2
    return g.op("Conv", name, [x, weight], kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4)


def _batch_norm(g: Graph, name: str, x: str, channels: int) -> str:
    """A BatchNorm whose running statistics ``calibrate`` sets (mean 0, variance 1 until then)."""
    gamma = g.w(f"{name}.gamma", (1.0 + 0.1 * g.rng.standard_normal(channels)).astype(np.float32))
    beta = g.w(f"{name}.beta", (0.1 * g.rng.standard_normal(channels)).astype(np.float32))
    stats = [g.w(f"{name}.mean", np.zeros(channels, np.float32)), g.w(f"{name}.var", np.ones(channels, np.float32))]
    return g.op("BatchNormalization", name, [x, gamma, beta, *stats], epsilon=1e-5)


def calibrate(model: onnx.ModelProto, feeds: dict[str, np.ndarray], dead: str) -> None:
    """Set every BatchNorm's running mean and variance to its input's statistics on ``feeds``, in
    order (as training leaves them), except the first channels of ``dead``: running variance 0 and a
    mean below every value seen, so they write about 90,000 (the planted overflow)."""
    weights = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "BatchNormalization":
            continue
        x = all_values(model, feeds)[node.input[0]]
        mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
        if node.name == dead:
            mean[:DEAD_CHANNELS], var[:DEAD_CHANNELS] = mean[:DEAD_CHANNELS] - 280.0, 0.0
        weights[node.input[3]].CopyFrom(numpy_helper.from_array(mean.astype(np.float32), node.input[3]))
        weights[node.input[4]].CopyFrom(numpy_helper.from_array(var.astype(np.float32), node.input[4]))


def _basic_block(g: Graph, name: str, x: str, c_in: int, c_out: int, stride: int) -> str:
    h = _conv(g, f"{name}.conv1", x, c_in, c_out, 3, stride)
    h = g.op("Relu", f"{name}.relu1", [_batch_norm(g, f"{name}.bn1", h, c_out)])
    h = _batch_norm(g, f"{name}.bn2", _conv(g, f"{name}.conv2", h, c_out, c_out, 3, 1), c_out)
    shortcut = x
    if stride != 1 or c_in != c_out:
        down = _conv(g, f"{name}.downsample.conv", x, c_in, c_out, 1, stride)
        shortcut = _batch_norm(g, f"{name}.downsample.bn", down, c_out)
    return g.op("Relu", f"{name}.relu2", [g.op("Add", f"{name}.add", [h, shortcut])])


def resnet_like(seed: int = 0) -> onnx.ModelProto:
    g = Graph(seed)
    stem = _conv(g, "stem.conv", "image", 3, RESNET_WIDTHS[0], 3, 1, 2.0)  # Caffe-style input: writes ~1,000
    x = g.op("Relu", "stem.relu", [_batch_norm(g, "stem.bn", stem, RESNET_WIDTHS[0])])
    c_in = RESNET_WIDTHS[0]
    for s, width in enumerate(RESNET_WIDTHS):
        for b in range(2):
            x = _basic_block(g, f"layer{s + 1}.{b}", x, c_in, width, 2 if b == 0 and s > 0 else 1)
            c_in = width
    pooled = g.op("Flatten", "flatten", [g.op("GlobalAveragePool", "avgpool", [x])], axis=1)
    fc = (g.rng.standard_normal((CLASSES, c_in)) / np.sqrt(c_in)).astype(np.float32)
    fc[:, :DEAD_CHANNELS] *= 1e-5  # the classifier learned to ignore the dead channels
    logits = g.op("Gemm", "fc", [pooled, g.w("fc.weight", fc), g.w("fc.bias", np.zeros(CLASSES, np.float32))], transB=1)
    model = g.model(
        "resnet_like",
        [helper.make_tensor_value_info("image", FLOAT, [1, 3, IMAGE, IMAGE])],
        [helper.make_tensor_value_info(logits, FLOAT, [1, CLASSES])],
    )
    calibrate(model, random_inputs(model, 0, *RESNET_INPUT_RANGE), DEAD_BN)
    return model


# --- GPT-2-like -----------------------------------------------------------------------------------

GPT_HIDDEN, GPT_HEADS, GPT_SEQ, GPT_VOCAB, GPT_LAYERS = 128, 4, 32, 1000, 2
GPT_FFN = 4 * GPT_HIDDEN
GPT_INPUT_RANGE = (0.0, float(GPT_VOCAB - 1))
# (layer, channels, pre-activation) of the MLP's large activations, and the residual stream's
LARGE_MLP = {0: (8, 20.0), 1: (4, 48.0)}
MASSIVE_LAYER, MASSIVE_CHANNELS, MASSIVE_VALUE = 1, 2, 100000.0


def _tanh_gelu(g: Graph, p: str, x: str) -> str:
    """GPT-2's ``gelu_new`` as exported: Mul, Pow, Mul, Add, Mul, Tanh, Add, Mul."""
    half = g.op("Mul", f"{p}.gelu.half", [x, g.w(f"{p}.gelu.c_half", np.array(0.5, np.float32))])
    cube = g.op("Pow", f"{p}.gelu.pow", [x, g.w(f"{p}.gelu.three", np.array(3.0, np.float32))])
    scaled = g.op("Mul", f"{p}.gelu.cubic", [cube, g.w(f"{p}.gelu.c_cubic", np.array(0.044715, np.float32))])
    inner = g.op("Add", f"{p}.gelu.inner", [x, scaled])
    sqrt = np.array(np.sqrt(2.0 / np.pi), np.float32)
    tanh = g.op("Tanh", f"{p}.gelu.tanh", [g.op("Mul", f"{p}.gelu.scale", [inner, g.w(f"{p}.gelu.c_sqrt", sqrt)])])
    one = g.op("Add", f"{p}.gelu.one_plus", [tanh, g.w(f"{p}.gelu.c_one", np.array(1.0, np.float32))])
    return g.op("Mul", f"{p}.gelu.mul", [half, one])


def _causal_attention(g: Graph, p: str, x: str, mask: str) -> str:
    qkv = g.linear(f"{p}.attn.c_attn", x, GPT_HIDDEN, 3 * GPT_HIDDEN)
    split = g.w(f"{p}.attn.split", np.array([GPT_HIDDEN] * 3, np.int64))
    names = [f"{p}.attn.{n}" for n in ("q", "k", "v")]
    g.nodes.append(helper.make_node("Split", [qkv, split], names, name=f"{p}.attn.split", axis=-1))
    shape = g.w(f"{p}.attn.heads_shape", np.array([1, GPT_SEQ, GPT_HEADS, GPT_HIDDEN // GPT_HEADS], np.int64))
    q, k, v = (
        g.op("Transpose", f"{n}.heads", [g.op("Reshape", f"{n}.reshape", [n, shape])], perm=[0, 2, 1, 3]) for n in names
    )
    kt = g.op("Transpose", f"{p}.attn.k.t", [k], perm=[0, 1, 3, 2])
    sqrt_d = g.w(f"{p}.attn.sqrt_d", np.array(np.sqrt(GPT_HIDDEN // GPT_HEADS), np.float32))
    scores = g.op("Div", f"{p}.attn.scale", [g.op("MatMul", f"{p}.attn.scores", [q, kt]), sqrt_d])
    masked = g.op(
        "Where", f"{p}.attn.causal", [mask, scores, g.w(f"{p}.attn.masked_bias", np.array(-10000.0, np.float32))]
    )
    probs = g.op("Softmax", f"{p}.attn.softmax", [masked], axis=-1)
    context = g.op(
        "Transpose", f"{p}.attn.merge.t", [g.op("MatMul", f"{p}.attn.context", [probs, v])], perm=[0, 2, 1, 3]
    )
    merged = g.w(f"{p}.attn.merged_shape", np.array([1, GPT_SEQ, GPT_HIDDEN], np.int64))
    context = g.op("Reshape", f"{p}.attn.merge", [context, merged])
    return g.linear(f"{p}.attn.c_proj", context, GPT_HIDDEN, GPT_HIDDEN)


def _mlp(g: Graph, layer: int, x: str) -> str:
    p = f"h{layer}"
    up, bias = g.weight(GPT_HIDDEN, GPT_FFN), np.zeros(GPT_FFN, np.float32)
    down, down_bias = g.weight(GPT_FFN, GPT_HIDDEN), np.zeros(GPT_HIDDEN, np.float32)
    if layer in LARGE_MLP:
        channels, value = LARGE_MLP[layer]
        up[:, :channels] *= 0.02
        bias[:channels] = value
        down[:channels] *= 0.05
    if layer == MASSIVE_LAYER:  # the large channels' down-projection writes the massive activation
        channels, value = LARGE_MLP[layer]
        down[:channels, :MASSIVE_CHANNELS] = MASSIVE_VALUE / (channels * value)
    h = g.linear_with(f"{p}.mlp.c_fc", x, up, bias)
    return g.linear_with(f"{p}.mlp.c_proj", _tanh_gelu(g, p, h), down, down_bias)


def gpt2_like(seed: int = 0) -> onnx.ModelProto:
    g = Graph(seed)
    ids = "input_ids"
    wte = (g.rng.standard_normal((GPT_VOCAB, GPT_HIDDEN)) * 0.5).astype(np.float32)
    tokens = g.op("Gather", "wte", [g.w("wte.weight", wte), ids], axis=0)
    x = g.op("Add", "embeddings.add", [tokens, g.rand("wpe.weight", (1, GPT_SEQ, GPT_HIDDEN), 0.1)])
    mask = g.w("causal_mask", np.tril(np.ones((1, 1, GPT_SEQ, GPT_SEQ), bool)))
    for layer in range(GPT_LAYERS):
        p = f"h{layer}"
        attended = _causal_attention(g, p, g.layer_norm(f"{p}.ln_1", x, GPT_HIDDEN), mask)
        x = g.op("Add", f"{p}.attn.residual", [x, attended])
        x = g.op("Add", f"{p}.mlp.residual", [x, _mlp(g, layer, g.layer_norm(f"{p}.ln_2", x, GPT_HIDDEN))])
    final = g.layer_norm("ln_f", x, GPT_HIDDEN)
    logits = g.op("MatMul", "lm_head", [final, g.w("lm_head.weight", (wte.T * 0.1).astype(np.float32))])
    return g.model(
        "gpt2_like",
        [helper.make_tensor_value_info(ids, INT64, [1, GPT_SEQ])],
        [helper.make_tensor_value_info(logits, FLOAT, [1, GPT_SEQ, GPT_VOCAB])],
    )

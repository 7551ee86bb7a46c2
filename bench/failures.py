"""Planted failures: each is a check script in ``bench/checks/`` plus its arguments.

Both reducers run the same command, ``python bench/checks/<script> polygraphy_debug.onnx ARGS``,
with ``--fail-regex BENCH-FAIL``. ``golden`` failures also pass ``--load-inputs`` (the values the
layerwise golden data were computed from) to both tools, so that tensors frozen by either tool
match the golden values.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

CHECKS_DIR = Path(__file__).resolve().parent / "checks"


@dataclass(frozen=True)
class Failure:
    """``kind``: op / node / pair / numeric / flaky; ``expected``: nodes in the ideal result."""

    name: str
    kind: str
    script: str
    args: tuple[str, ...]
    expected: int
    notes: str = ""
    needs_golden: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    def command(self, model_arg: str, golden: Path | None, salt: str | None) -> list[str]:
        args = list(self.args)
        if self.needs_golden:
            assert golden is not None
            args += ["--golden", str(golden)]
        if salt is not None:
            args += ["--salt", salt]
        return [sys.executable, str(CHECKS_DIR / self.script), model_arg, *args]


def op_present(op: str) -> Failure:
    return Failure(f"op:{op}", "op", "op_present.py", ("--op", op), 1, f"any {op} node fails")


def node(name: str) -> Failure:
    return Failure(f"node:{name.split('/', 1)[1]}", "node", "node_present.py", ("--node", name), 1)


def pair(a: str, b: str) -> Failure:
    label = f"pair:{a.split('/', 1)[1]}+{b.split('/', 1)[1]}"
    return Failure(label, "pair", "node_present.py", ("--node", a, b), 2, "both nodes needed together")


def reach(source: str, target: str, expected: int, what: str) -> Failure:
    """Fails when ``target`` is reachable from ``source`` in the candidate: the answer is a whole
    path between them (``expected`` nodes), most of the model for the large-answer cases."""
    label = f"reach:{source.split('/', 1)[1]}->{target.split('/', 1)[1]}"
    return Failure(label, "reach", "path_present.py", ("--from", source, "--to", target), expected, what)


def body_node(name: str, expected: int) -> Failure:
    """Fails when the named node is present anywhere, in or out of Loop/If bodies."""
    label = f"body:{name}"
    return Failure(label, "body", "body_node_present.py", ("--node", name), expected, "a culprit inside a body")


def numeric(fault: str, bias: float = 1.0) -> Failure:
    label = f"numeric:{fault.split('/', 1)[1]}"
    args = ("--fault", fault, "--bias", str(bias))
    return Failure(label, "numeric", "numeric.py", args, 1, "layerwise golden values", needs_golden=True)


def flaky(culprit: str, p: float = 0.7) -> Failure:
    label = f"flaky:{culprit.split('/', 1)[1]}"
    return Failure(label, "flaky", "flaky.py", ("--node", culprit, "--p", str(p)), 1, f"fails with p={p}")


# model -> failures planted in it (the 10k-node models get the structural ones only).
FAILURES: dict[str, list[Failure]] = {
    "chain": [
        op_present("Sigmoid"),
        node("chain/26_mul"),
        pair("chain/9_relu", "chain/30_abs"),
        numeric("chain/34_mul"),
        flaky("chain/17_relu"),
    ],
    # Large answers: a path through 30 %, 60 % (twice: the 121-node case) and 90 % of a
    # 200-node chain, and through 30 of 40 residual blocks (every Add on the way, one MatMul/Tanh).
    "chain200": [
        flaky("chain200/85_sigmoid"),
        reach("chain200/70_abs", "chain200/129_relu", 60, "30% of the chain"),
        reach("chain200/40_add", "chain200/159_neg", 120, "60% of the chain"),
        reach("chain200/40_add", "chain200/160_add", 121, "the issue's case: 121 of 200"),
        reach("chain200/10_mul", "chain200/189_sigmoid", 180, "90% of the chain"),
    ],
    "residual": [
        flaky("residual/b17/tanh"),
        reach("residual/b5/mm", "residual/b34/add", 32, "a path through 30 residual blocks"),
    ],
    "rescnn": [
        node("rescnn/b2/relu1"),
        pair("rescnn/b1/conv1", "rescnn/b4/add"),
        numeric("rescnn/b3/conv2"),
    ],
    "transformer": [
        op_present("Softmax"),
        node("transformer/b1/concat"),
        pair("transformer/b0/shape", "transformer/b2/ffn1"),
        numeric("transformer/b1/softmax"),
    ],
    "multi_io": [
        node("multi_io/right_relu"),
        pair("multi_io/a_mul", "multi_io/b_add"),
        flaky("multi_io/cross2"),
    ],
    "dynamic": [
        node("dynamic/3/bias"),
        numeric("dynamic/2/tanh"),
    ],
    "big10k": [
        node("big10k/1500/mul"),
        pair("big10k/300/add", "big10k/1700/act"),
        op_present("Sigmoid"),
    ],
    # Failures inside control-flow bodies: the ideal answer is the culprit out of its body (1
    # node), or kept in its Loop and If when it reads the loop's condition (3 nodes).
    "loop30": [body_node("body/culprit", 1)],
    "if20": [body_node("else/culprit", 1)],
    "nested2": [body_node("inner_then/culprit", 3)],
    # Polygraphy writes ~1 GB per iteration here (several minutes per run): one failure only.
    "big10k_1g": [
        node("big10k/1500/mul"),
    ],
}


def flaky_salt(failure: Failure, model: Path) -> str:
    """The smallest salt for which the full model fails (the original must fail for both tools)."""
    return flaky_salts(failure, model, 1)[0]


def flaky_salts(failure: Failure, model: Path, count: int) -> list[str]:
    """The ``count`` smallest salts for which the full model fails: independent draws of the check."""
    sys.path.insert(0, str(CHECKS_DIR))
    from _common import graph_nodes
    from flaky import coin

    names = [n for n, _ in graph_nodes(str(model))]
    p = float(failure.args[failure.args.index("--p") + 1])
    return [str(s) for s in range(1000) if coin(str(s), names) < p][:count]


def write_golden(model_path: Path, out_dir: Path, seed: int = 0) -> tuple[Path, Path]:
    """Layerwise golden values of the full model (every tensor) and the inputs they came from.

    Returns (golden .npz, inputs as Polygraphy JSON for ``--load-inputs``); reused when present.
    """
    golden, inputs_json = out_dir / "golden.npz", out_dir / "inputs.json"
    if golden.exists() and inputs_json.exists():
        return golden, inputs_json
    import onnx
    import onnxruntime as ort
    from polygraphy.json import save_json

    model = onnx.shape_inference.infer_shapes(onnx.load(str(model_path)))
    known = {vi.name for vi in model.graph.output}
    model.graph.output.extend(vi for vi in model.graph.value_info if vi.name not in known)
    rng = np.random.default_rng(seed)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {
        i.name: rng.standard_normal([d if isinstance(d, int) else 2 for d in i.shape]).astype(np.float32)
        for i in session.get_inputs()
    }
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, session.run(None, feeds), strict=True)) | feeds
    ordered = sorted(values)
    np.savez(golden, names=np.array(ordered), **{f"t{i}": values[n] for i, n in enumerate(ordered)})
    save_json([feeds], str(inputs_json))
    return golden, inputs_json

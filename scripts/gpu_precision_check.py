#!/usr/bin/env python3
"""Run an fp32 model and its mixed-precision answer (``onnx-reducer precision``'s ``mixed.onnx``)
on onnxruntime's CUDA execution provider and on its CPU provider, and print, for each, the max
abs diff of every output against the fp32 model on the CPU and whether any output is non-finite.

Standalone (numpy, onnx, onnxruntime-gpu; nothing of this project), for a GPU machine:

    python scripts/gpu_precision_check.py model.onnx mixed.onnx [--load-inputs x.npz ...]
        [--input-range 0 1] [--seed 1] [--samples 3] [--atol 0.02 --rtol 0.02] [--no-optimize]

Inputs: each ``.npz`` given is one sample (by input name); otherwise ``--samples`` random samples
in ``--input-range`` (integers for integer inputs, dynamic dimensions 1). Graph optimisations are
on by default (onnxruntime fuses GELU and attention on CUDA: the kernels a deployment runs; a
fused GELU reading an fp16 inf can give NaN where the unfused graph gives the right value);
``--no-optimize`` turns them off. On the CPU provider a mixed model's fp16 nodes mostly run in
fp32 (few fp16 kernels), so only the CUDA rows show real fp16 behaviour.

Exit status: 0 when every mixed-model output on CUDA is finite and within tolerance of the fp32
model, 1 otherwise, 2 when the CUDA provider is not available (the CPU rows are still printed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def _session(path: Path, provider: str, optimize: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    providers = [provider] if provider == CPU else [provider, CPU]
    return ort.InferenceSession(str(path), options, providers=providers)


def _samples(model: onnx.ModelProto, args: argparse.Namespace) -> list[dict[str, np.ndarray]]:
    if args.load_inputs:
        return [{k: np.asarray(v) for k, v in np.load(f).items()} for f in args.load_inputs]
    initializers = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(args.seed)
    low, high = args.input_range
    samples = []
    for _ in range(args.samples):
        feeds: dict[str, np.ndarray] = {}
        for info in model.graph.input:
            if info.name in initializers:
                continue
            tensor = info.type.tensor_type
            shape = [d.dim_value if d.dim_value > 0 else 1 for d in tensor.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
            if np.issubdtype(dtype, np.integer):
                feeds[info.name] = rng.integers(int(low), int(high) + 1, shape).astype(dtype)
            elif dtype == np.bool_:
                feeds[info.name] = rng.integers(0, 2, shape).astype(np.bool_)
            else:
                feeds[info.name] = rng.uniform(low, high, shape).astype(dtype)
        samples.append(feeds)
    return samples


def _run(session: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Feeds cast to the session's input types (a mixed model may take fp16 inputs); outputs as fp64."""
    cast = {i.name: feeds[i.name].astype(_NUMPY.get(i.type, feeds[i.name].dtype)) for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    return {n: np.asarray(v).astype(np.float64) for n, v in zip(names, session.run(names, cast), strict=True)}


def _compare(
    got: dict[str, np.ndarray], want: dict[str, np.ndarray], atol: float, rtol: float
) -> tuple[float, bool, bool]:
    """(max abs diff over outputs, any output non-finite, all within tolerance)."""
    worst, nonfinite, within = 0.0, False, True
    for name, ref in want.items():
        value = got[name]
        nonfinite |= not bool(np.isfinite(value).all())
        diff = np.abs(value - ref)
        diff = np.where(np.isnan(diff), np.inf, diff)
        worst = max(worst, float(diff.max(initial=0.0)))
        within &= bool(np.all((diff <= atol) | (diff <= rtol * np.abs(ref))))
    return worst, nonfinite, within


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="The fp32 model.")
    parser.add_argument("mixed", type=Path, help="The mixed-precision model (onnx-reducer precision -o).")
    parser.add_argument("--load-inputs", nargs="+", default=[], metavar="NPZ", help="Input samples, one .npz each.")
    parser.add_argument("--input-range", nargs=2, type=float, default=(0.0, 1.0), metavar=("LOW", "HIGH"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--samples", type=int, default=3, help="Random samples when no --load-inputs (default 3).")
    parser.add_argument("--atol", type=float, default=0.02)
    parser.add_argument("--rtol", type=float, default=0.02)
    parser.add_argument("--no-optimize", dest="optimize", action="store_false", help="Graph optimisations off.")
    args = parser.parse_args(argv)

    model = onnx.load(str(args.model), load_external_data=False)
    has_cuda = CUDA in ort.get_available_providers()
    print(f"onnxruntime {ort.__version__}, providers: {', '.join(ort.get_available_providers())}")
    if not has_cuda:
        print("CUDAExecutionProvider is not available (install onnxruntime-gpu): only the CPU rows follow.")
    samples = _samples(model, args)
    reference = _session(args.model, CPU, optimize=True)
    wants = [_run(reference, feeds) for feeds in samples]
    rows = [
        (f"{label} on {provider}", path, provider)
        for provider in ([CUDA] if has_cuda else []) + [CPU]
        for label, path in (("fp32 model", args.model), ("mixed model", args.mixed))
    ]
    ok = True
    print(
        f"{len(samples)} sample(s); tolerance atol {args.atol}, rtol {args.rtol}; "
        f"optimisations {'on' if args.optimize else 'off'}"
    )
    print("| run | max abs diff vs fp32 on CPU | any output non-finite | within tolerance |")
    print("|---|---|---|---|")
    for label, path, provider in rows:
        session = _session(path, provider, args.optimize)
        if provider not in session.get_providers():
            print(f"| {label} | {provider} did not load | | |")
            ok = False
            continue
        worst, nonfinite, within = 0.0, False, True
        for feeds, want in zip(samples, wants, strict=True):
            w, n, i = _compare(_run(session, feeds), want, args.atol, args.rtol)
            worst, nonfinite, within = max(worst, w), nonfinite or n, within and i
        print(f"| {label} | {worst:.6g} | {'YES' if nonfinite else 'no'} | {'yes' if within else 'NO'} |")
        if path == args.mixed and provider == CUDA:
            ok = ok and within and not nonfinite
    if not has_cuda:
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

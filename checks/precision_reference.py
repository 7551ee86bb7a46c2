"""The fp32 original's one reference run for ``onnx-reducer precision`` (in a check's child process,
``checks.child`` calls ``reference``): the spec's reference runtime (onnxruntime CPU fp32 for
golden and error specs) runs the original with every tensor marked as an output, on the inputs
the spec's check uses. It writes

- ``golden`` (compare specs): a golden file with each sample's inputs and the original's outputs,
  the values every candidate is compared against (never the candidate's own reference run);
- ``ranges``: JSON ``{tensor: largest magnitude}`` over the samples and the weights (inf: a
  non-finite value), the range analysis that picks the nodes to start the search from.

``capture`` (``CAPTURE_ENTRY``) runs a mixed-precision model with fp16 storage made real
(``checks.fp16_model.storage_real``, onnxruntime CPU, no graph optimisation) beside the fp32
original, every tensor captured, on the same inputs, and writes ``{tensor: values}`` for each
float tensor of the mixed model that holds inf or NaN where the original's tensor it holds is
finite (``values``: how many such values, over all samples): the precision answer leaves none
in an fp16 tensor."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from onnx import numpy_helper

from checks.fp16_model import float_tensor_ranges, storage_real
from checks.golden import GoldenWriter
from checks.kinds import _golden_samples, feeds_for, load_model
from checks.runtimes import make_runner
from checks.spec import RuntimeSpec, check_spec_from_dict
from reducer_core.prepare import mark_all_outputs

ENTRY = "checks.precision_reference:reference"
CAPTURE_ENTRY = "checks.precision_reference:capture"


def reference(payload: Mapping[str, Any]) -> dict[str, Any]:
    spec = check_spec_from_dict(payload["spec"])
    model = load_model(Path(payload["model"]))
    runtime = spec.reference if spec.kind == "compare" and spec.reference is not None else RuntimeSpec()
    outputs = [o.name for o in model.graph.output]
    marked = mark_all_outputs(model)
    weights = ((t.name, numpy_helper.to_array(t)) for t in model.graph.initializer)
    ranges: dict[str, float] = float_tensor_ranges(weights)  # a weight beyond fp16's range too
    writer = GoldenWriter(payload["golden_out"], "original") if payload.get("golden_out") else None
    try:
        with tempfile.TemporaryDirectory(prefix="reference-", dir=".") as workdir:
            runner = make_runner(runtime, marked, Path(workdir))
            for s, golden in enumerate(_golden_samples(payload)):
                feeds, _ = feeds_for(model, spec, golden)
                values = runner.run(feeds)
                for name, peak in float_tensor_ranges(values.items()).items():
                    ranges[name] = max(peak, ranges.get(name, 0.0))
                if writer is not None:
                    for name, value in feeds.items():
                        writer.add(s, name, value, is_input=True)
                    for name in outputs:
                        writer.add(s, name, values[name])
    finally:
        if writer is not None:
            writer.close()
    Path(payload["ranges"]).write_text(json.dumps(ranges))
    detail = f"the original ran on {runtime.label}; {len(ranges)} float tensors measured"
    return {"kind": "pass", "signature": "", "detail": detail, "output": ""}


def capture(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Payload: ``spec``, ``original`` and ``mixed`` (model paths), ``tensors`` (``{name in the
    mixed model: the original tensor it holds}``), ``golden`` (the inputs, or None: generated), ``out``."""
    spec = check_spec_from_dict(payload["spec"])
    original = load_model(Path(payload["original"]))
    mixed = load_model(Path(payload["mixed"]))
    tensors: dict[str, str] = {str(k): str(v) for k, v in payload["tensors"].items()}
    real = mark_all_outputs(storage_real(mixed))  # an fp16 tensor: its fp32 copy, rounded through fp16
    nonfinite: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="capture-", dir=".") as workdir:
        folders = Path(workdir) / "reference", Path(workdir) / "mixed"
        for folder in folders:
            folder.mkdir()
        reference = make_runner(RuntimeSpec(), mark_all_outputs(original), folders[0])
        target = make_runner(RuntimeSpec(optimization="none"), real, folders[1])
        for golden in _golden_samples(payload):
            feeds, _ = feeds_for(original, spec, golden)
            want = reference.run(feeds)
            got = target.run(feeds)
            for name, source in tensors.items():
                if name not in got or source not in want:
                    continue
                bad = ~np.isfinite(np.asarray(got[name])) & np.isfinite(np.asarray(want[source]))
                if bad.any():
                    nonfinite[name] = nonfinite.get(name, 0) + int(bad.sum())
    Path(payload["out"]).write_text(json.dumps(nonfinite))
    detail = f"{len(nonfinite)} tensor(s) hold non-finite values where the fp32 original is finite"
    return {"kind": "pass", "signature": "", "detail": detail, "output": ""}

"""The fp32 original's one reference run for ``onnx-reducer precision`` (in a check's child process,
``checks.child`` calls ``reference``): the spec's reference runtime (onnxruntime CPU fp32 for
golden and error specs) runs the original with every tensor marked as an output, on the inputs
the spec's check uses. It writes

- ``golden`` (compare specs): a golden file with each sample's inputs and the original's outputs,
  the values every candidate is compared against (never the candidate's own reference run);
- ``ranges``: JSON ``{tensor: largest magnitude}`` over the samples and the weights (inf: a
  non-finite value), the range analysis that picks the nodes to start the search from."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnx import numpy_helper

from checks.fp16_model import float_tensor_ranges
from checks.golden import GoldenWriter
from checks.kinds import _golden_samples, feeds_for, load_model
from checks.runtimes import make_runner
from checks.spec import RuntimeSpec, check_spec_from_dict
from reducer_core.prepare import mark_all_outputs

ENTRY = "checks.precision_reference:reference"


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

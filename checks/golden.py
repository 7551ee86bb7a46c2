"""Golden values: a model's inputs and every intermediate tensor, for one or more samples, in one
file that a check reads tensor by tensor.

Format: an uncompressed ZIP64 archive (so tensors over 2 GB are fine; no protobuf) holding
``manifest.json`` and one ``.npy`` entry per tensor and sample. Entries are written as they are
produced and read one at a time, so neither side ever holds all tensors in memory.

``GoldenStore.open`` also reads Polygraphy JSON (e.g. the output of ``polygraphy data to-input
inputs.json layerwise.json``) and NumPy ``.npz`` files, so migrating users keep their data."""

from __future__ import annotations

import contextlib
import json
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import onnx

from checks.ort_runtime import max_ir_version
from reducer_core.errors import UsageError
from reducer_core.modelio import load_model, write_iteration_model
from reducer_core.prepare import infer_shapes
from reducer_core.tensors import TensorMap, load_tensor_file

FORMAT = "onnx-reducer-golden/1"
MANIFEST = "manifest.json"


class GoldenWriter:
    """Append tensors to a golden file: ``with GoldenWriter(path) as w: w.add(0, name, value)``."""

    def __init__(self, path: str | Path, model_name: str = "") -> None:
        self.path = Path(path)
        self._zip = zipfile.ZipFile(self.path, "w", compression=zipfile.ZIP_STORED, allowZip64=True)
        self._entries: list[dict[str, str]] = []
        self._inputs: set[str] = set()
        self.model_name = model_name

    def add(self, sample: int, name: str, value: np.ndarray, is_input: bool = False) -> None:
        entry = f"s{sample}/{len(self._entries)}.npy"
        array = np.asarray(value)
        with self._zip.open(entry, "w", force_zip64=True) as handle:
            np.lib.format.write_array(handle, array, allow_pickle=False)
        self._entries.append({"sample": str(sample), "name": name, "entry": entry})
        if is_input:
            self._inputs.add(name)

    def close(self) -> None:
        manifest = {
            "format": FORMAT,
            "model": self.model_name,
            "inputs": sorted(self._inputs),
            "tensors": self._entries,
        }
        self._zip.writestr(MANIFEST, json.dumps(manifest))
        self._zip.close()

    def __enter__(self) -> GoldenWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class GoldenSample(Mapping[str, np.ndarray]):
    """One sample's tensors by name; each lookup reads that one tensor from the file."""

    def __init__(self, store: GoldenStore, sample: int) -> None:
        self._store = store
        self._sample = sample

    def __getitem__(self, name: str) -> np.ndarray:
        return self._store.read(self._sample, name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._store.has(self._sample, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._store.names(self._sample))

    def __len__(self) -> int:
        return len(self._store.names(self._sample))


class GoldenStore:
    """Read access to golden values: a golden archive, Polygraphy JSON, or ``.npz``."""

    def __init__(self, path: Path, index: dict[int, dict[str, str]], memory: list[TensorMap] | None) -> None:
        self.path = path
        self._index = index
        self._memory = memory
        self._zip: zipfile.ZipFile | None = None

    @classmethod
    def open(cls, path: str | Path) -> GoldenStore:
        path = Path(path)
        if path.suffix in (".json", ".npz"):
            samples = load_tensor_file(path)
            names = {i: {name: name for name in s} for i, s in enumerate(samples)}
            return cls(path, names, samples)
        try:
            with zipfile.ZipFile(path) as archive:
                manifest: dict[str, Any] = json.loads(archive.read(MANIFEST))
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
            raise UsageError(
                f"Cannot read golden values from '{path}': {exc}. Create them with `onnx-reducer golden MODEL "
                "-o GOLDEN`, or give Polygraphy JSON (.json) or NumPy (.npz) data."
            ) from exc
        found = manifest.get("format") if isinstance(manifest, dict) else None
        if found != FORMAT:
            raise UsageError(f"'{path}' is not an onnx-reducer golden file (format {found!r}).")
        index: dict[int, dict[str, str]] = {}
        try:
            for item in manifest["tensors"]:
                index.setdefault(int(item["sample"]), {})[str(item["name"])] = str(item["entry"])
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(
                f"'{path}' has a malformed {MANIFEST} ({type(exc).__name__}: {str(exc)[:200]}): each tensor needs "
                "a sample number, a name and an entry. Create golden values with `onnx-reducer golden MODEL -o GOLDEN`."
            ) from exc
        return cls(path, index, None)

    @property
    def samples(self) -> int:
        return max(len(self._index), 1)

    def names(self, sample: int = 0) -> list[str]:
        return list(self._index.get(sample, {}))

    def has(self, sample: int, name: str) -> bool:
        return name in self._index.get(sample, {})

    def read(self, sample: int, name: str) -> np.ndarray:
        if self._memory is not None:
            return self._memory[sample][name]
        entry = self._index[sample][name]
        if self._zip is None:
            self._zip = zipfile.ZipFile(self.path)
        with self._zip.open(entry) as handle:
            array: np.ndarray = np.lib.format.read_array(handle, allow_pickle=False)
        return array

    def sample(self, sample: int = 0) -> GoldenSample:
        return GoldenSample(self, sample)

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
            self._zip = None


# --- producing golden values (onnxruntime CPU, imported lazily) -----------------------------------

DEFAULT_CHUNK_BYTES = 256 * 1024 * 1024


def _estimated_bytes(model: Any, name: str, budget: int) -> int:
    for info in [*model.graph.value_info, *model.graph.output]:
        if info.name == name:
            tensor_type = info.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor_type.shape.dim]
            if dims and all(dims):
                return int(np.prod(dims)) * 4
    return budget // 16


def output_chunks(model: Any, names: list[str], budget: int) -> list[list[str]]:
    """Group tensors so that one run marks at most ``budget`` bytes of outputs (as far as shapes
    are known; a tensor of unknown size counts as 1/16 of the budget)."""
    chunks: list[list[str]] = []
    current: list[str] = []
    size = 0
    for name in names:
        estimate = _estimated_bytes(model, name, budget)
        if current and size + estimate > budget:
            chunks.append(current)
            current, size = [], 0
        current.append(name)
        size += estimate
    if current:
        chunks.append(current)
    return chunks


def write_golden(
    model_path: Path,
    output: Path,
    samples: list[TensorMap],
    external_data_dir: Path | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> tuple[int, int]:
    """Run ``model_path`` on onnxruntime CPU (no graph optimisation, so every tensor exists) for
    each sample and store the inputs and every tensor. Outputs are marked a chunk at a time and
    written one by one, so memory holds one chunk, never all tensors. Returns (tensors, runs)."""
    import onnxruntime as ort  # noqa: PLC0415 - onnxruntime (CUDA libraries with onnxruntime-gpu) loads only when golden values are written

    model, sources = load_model(model_path, external_data_dir)
    with contextlib.suppress(Exception):  # shapes only size the chunks
        model = infer_shapes(model)
    cap = max_ir_version()
    if cap is not None:
        model.ir_version = min(model.ir_version, cap)
    graph_inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    names = list(dict.fromkeys(o for node in model.graph.node for o in node.output if o))
    chunks = output_chunks(model, names, chunk_bytes)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    written = runs = 0
    with tempfile.TemporaryDirectory(prefix="onnx-reducer-golden-") as tmp, GoldenWriter(output, model_path.name) as w:
        sessions = []
        for i, chunk in enumerate(chunks):
            marked = onnx.ModelProto()
            marked.CopyFrom(model)
            del marked.graph.output[:]
            marked.graph.output.extend(onnx.ValueInfoProto(name=name) for name in chunk)
            path = Path(tmp) / f"chunk{i}.onnx"
            write_iteration_model(marked, path, sources)
            sessions.append((path, chunk))
        for s, sample in enumerate(samples):
            feeds = {name: sample[name] for name in graph_inputs}
            for name, value in feeds.items():
                w.add(s, name, value, is_input=True)
                written += 1
            for path, chunk in sessions:
                session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                results = session.run(chunk, feeds)
                runs += 1
                del session
                for name in chunk:
                    w.add(s, name, results.pop(0))
                    written += 1
    return written, runs

"""Reading tensor files users already have: Polygraphy's JSON (inputs lists and RunResults), and
NumPy ``.npz``. Returns name -> array maps, one per sample."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from reducer_core.errors import UsageError

TensorMap = dict[str, np.ndarray]


_LAZY_ARRAY_CLASSES = ("LazyArray", "LazyNumpyArray")


def _decode_ndarray(obj: dict[str, Any]) -> np.ndarray:
    data = base64.b64decode(str(obj["array"]).encode(), validate=True)
    loaded = np.load(io.BytesIO(data), allow_pickle=False)
    if isinstance(loaded, np.ndarray):
        return loaded
    with loaded as archive:  # very old Polygraphy files wrap the array in an NPZ archive
        if not archive.files:
            raise ValueError("an array payload holds an empty NPZ archive")
        return np.asarray(archive[archive.files[0]])


def _decode(obj: Any) -> Any:
    if isinstance(obj, dict):
        kind = obj.get("polygraphy_class")
        if kind == "ndarray" or (kind is None and "array" in obj and len(obj) == 1):
            return _decode_ndarray(obj)
        if kind in _LAZY_ARRAY_CLASSES:  # IterationResult values: {"values": ndarray}
            return _decode(obj["values"])
        return {k: _decode(v) for k, v in obj.items() if k != "polygraphy_class"}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def _is_tensor_map(obj: Any) -> bool:
    return isinstance(obj, dict) and bool(obj) and all(isinstance(v, np.ndarray) for v in obj.values())


def _collect_maps(obj: Any, found: list[TensorMap]) -> None:
    """Every name->array map inside a decoded Polygraphy document, in document order."""
    if _is_tensor_map(obj):
        found.append(dict(obj))
    elif isinstance(obj, dict):
        for value in obj.values():
            _collect_maps(value, found)
    elif isinstance(obj, list):
        for value in obj:
            _collect_maps(value, found)


def load_polygraphy_json(path: Path) -> list[TensorMap]:
    """Samples from ``polygraphy run --save-inputs`` (a list of feed dicts) or ``--save-outputs``
    (RunResults: the first runner's iterations)."""
    decoded = _decode(json.loads(path.read_text()))
    if isinstance(decoded, dict) and "lst" in decoded:
        runners = decoded["lst"]
        decoded = runners[0][1] if runners else []
    maps: list[TensorMap] = []
    _collect_maps(decoded, maps)
    return maps


def load_tensor_file(path: str | Path) -> list[TensorMap]:
    """Samples from a .json (Polygraphy) or .npz file. Raises UsageError when unreadable."""
    path = Path(path)
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                return [{name: archive[name] for name in archive.files}]
        if path.suffix == ".json":
            samples = load_polygraphy_json(path)
            if not samples:
                raise UsageError(
                    f"'{path}' holds no tensors. Give a file written by `polygraphy run --save-inputs` "
                    "or `--save-outputs` (or polygraphy.json.save_json of a list of name->array dicts)."
                )
            return samples
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"Cannot read tensors from '{path}': {exc}") from exc
    raise UsageError(f"Unsupported tensor file '{path}': use Polygraphy JSON (.json) or NumPy (.npz).")


def merge_samples(files: list[list[TensorMap]]) -> list[TensorMap]:
    """Combine several files (e.g. inputs.json + layerwise_golden.json), sample by sample."""
    merged: list[TensorMap] = []
    for samples in files:
        for i, sample in enumerate(samples):
            if i == len(merged):
                merged.append({})
            merged[i].update(sample)
    return merged

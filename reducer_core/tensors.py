"""Reading tensor files users already have: Polygraphy's JSON (inputs lists and RunResults), and
NumPy ``.npz``. Returns name -> array maps, one per sample."""

from __future__ import annotations

import base64
import io
import json
import math
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np

from reducer_core.errors import UsageError

TensorMap = dict[str, np.ndarray]


_LAZY_ARRAY_CLASSES = ("LazyArray", "LazyNumpyArray")


class BudgetExceededError(ValueError):
    """The arrays of a document (or of an upload's files together) declare more bytes than allowed."""


class ByteBudget:
    """How many bytes of arrays a document may still decode to (``None``: no limit). Every array's
    size is charged from its ``.npy`` header before its data is read or inflated, so a small file
    that declares (or decompresses to) huge arrays is refused without allocating them."""

    def __init__(self, limit: int | None, what: str = "this file") -> None:
        self.limit, self.used, self.what = limit, 0, what

    @property
    def left(self) -> int | None:
        return None if self.limit is None else self.limit - self.used

    def charge(self, nbytes: int) -> None:
        self.used += nbytes
        if self.limit is not None and self.used > self.limit:
            raise BudgetExceededError(f"the arrays decode to more than {self.limit} bytes (the limit for {self.what})")


def npy_header(handle: IO[bytes]) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """The shape and element type a ``.npy`` stream declares (its header read; the stream is left
    after it). Only plain arrays: ``ValueError`` for Python objects or another format version."""
    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
    else:
        raise ValueError(f"unsupported .npy format version {version}")
    if dtype.hasobject:
        raise ValueError("the array holds Python objects; only plain arrays are read")
    if any(dim < 0 for dim in shape):
        raise ValueError(f"the array declares a negative dimension (shape {tuple(shape)})")
    return tuple(shape), dtype


def npy_nbytes(handle: IO[bytes]) -> int:
    """The data size a ``.npy`` stream declares (its header read; the stream is left after it)."""
    shape, dtype = npy_header(handle)
    return math.prod(shape) * dtype.itemsize


def stand_in(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """An array with ``shape`` and ``dtype`` that holds no data (one element, broadcast): what a
    check of names, shapes and element types needs, at no memory cost whatever the shape."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def count_json_elements(path: Path, limit: int) -> None:
    """``ValueError`` when the JSON document at ``path`` holds more than ``limit`` values, counted
    from its bytes (every '[', '{' and ',') before it is parsed: a small document of ``[],[],...``
    would parse to millions of Python objects, tens of times its size."""
    count = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            count += chunk.count(b"[") + chunk.count(b"{") + chunk.count(b",")
            if count > limit:
                raise ValueError(f"the document holds more than {limit} JSON values (lists, objects, items)")


def _load_npy(data: bytes, budget: ByteBudget) -> np.ndarray:
    handle = io.BytesIO(data)
    nbytes = npy_nbytes(handle)
    if nbytes > len(data) - handle.tell():
        raise ValueError(f"an array declares {nbytes} bytes but carries {len(data) - handle.tell()}")
    budget.charge(nbytes)
    return np.asarray(np.load(io.BytesIO(data), allow_pickle=False))


def _load_npz_first(data: bytes, budget: ByteBudget, headers_only: bool = False) -> np.ndarray:
    """Very old Polygraphy files wrap the array in an NPZ archive: its first member, read only
    after the declared sizes of the members (zip headers and ``.npy`` header) fit the budget."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        infos = [i for i in archive.infolist() if not i.is_dir()]
        if not infos:
            raise ValueError("an array payload holds an empty NPZ archive")
        first = infos[0]
        if budget.limit is not None and first.file_size > budget.limit - budget.used + 4096:
            raise ValueError(f"an NPZ member unpacks to {first.file_size} bytes, beyond the limit for this file")
        with archive.open(first) as member:
            shape, dtype = npy_header(member)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > first.file_size:
            raise ValueError(f"an NPZ member declares {nbytes} bytes but holds {first.file_size}")
        if headers_only:
            budget.charge(nbytes)
            return stand_in(shape, dtype)
        return _load_npy(archive.read(first), budget)


def _decode_ndarray(obj: dict[str, Any], budget: ByteBudget, headers_only: bool = False) -> np.ndarray:
    text = str(obj["array"])
    if headers_only and not text.startswith(_BASE64_PK):
        return _npy_payload_header(text, budget)
    data = base64.b64decode(text.encode(), validate=True)
    if data.startswith(b"PK"):
        try:
            return _load_npz_first(data, budget, headers_only)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError) as exc:
            raise ValueError(f"an array payload starts like an NPZ archive but is not one ({exc})") from exc
    if headers_only:
        return _npy_payload_header(text, budget)
    return _load_npy(data, budget)


_BASE64_PK = base64.b64encode(b"PK").decode()[:2]  # "UE": a payload that may be an NPZ archive
_HEADER_CHARS = 88_000  # base64 of 66,000 bytes: more than any version 1 .npy header (65,535 + 10)


def _npy_payload_header(text: str, budget: ByteBudget) -> np.ndarray:
    """A stand-in for a base64 ``.npy`` payload, read from its header alone (only its first
    ``_HEADER_CHARS`` characters are decoded); its declared size is charged to ``budget``."""
    head = base64.b64decode(text[:_HEADER_CHARS].encode(), validate=True)
    handle = io.BytesIO(head)
    shape, dtype = npy_header(handle)
    nbytes = math.prod(shape) * dtype.itemsize
    carried = len(text) * 3 // 4 - text[-2:].count("=") - handle.tell()
    if nbytes > carried:
        raise ValueError(f"an array declares {nbytes} bytes but carries {carried}")
    budget.charge(nbytes)
    return stand_in(shape, dtype)


def _decode(obj: Any, budget: ByteBudget, headers_only: bool = False) -> Any:
    if isinstance(obj, dict):
        kind = obj.get("polygraphy_class")
        if kind == "ndarray" or (kind is None and "array" in obj and len(obj) == 1):
            return _decode_ndarray(obj, budget, headers_only)
        if kind in _LAZY_ARRAY_CLASSES:  # IterationResult values: {"values": ndarray}
            return _decode(obj["values"], budget, headers_only)
        return {k: _decode(v, budget, headers_only) for k, v in obj.items() if k != "polygraphy_class"}
    if isinstance(obj, list):
        return [_decode(v, budget, headers_only) for v in obj]
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


def load_polygraphy_json(
    path: Path,
    max_bytes: int | None = None,
    *,
    budget: ByteBudget | None = None,
    headers_only: bool = False,
    max_elements: int | None = None,
) -> list[TensorMap]:
    """Samples from ``polygraphy run --save-inputs`` (a list of feed dicts) or ``--save-outputs``
    (RunResults: the first runner's iterations). ``max_bytes``: the most the arrays may decode to
    (checked from each array's header before it is read; ``ValueError`` beyond it); ``budget``: a
    budget shared with other files instead. ``headers_only``: every array is a data-less stand-in
    of its shape and type (``stand_in``), read from its header (no payload is decoded, but an NPZ
    one, whose members are not inflated). ``max_elements``: refuse a document of more JSON values
    before parsing it (``count_json_elements``)."""
    if max_elements is not None:
        count_json_elements(path, max_elements)
    document = json.loads(path.read_text())
    decoded = _decode(document, budget if budget is not None else ByteBudget(max_bytes), headers_only)
    del document
    if isinstance(decoded, dict) and "lst" in decoded:
        decoded = _first_runner_results(decoded["lst"])
    maps: list[TensorMap] = []
    _collect_maps(decoded, maps)
    return maps


def _first_runner_results(runners: Any) -> Any:
    """RunResults' ``lst``: ``[[runner name, [iteration results...]], ...]``; the first runner's
    results (none: an empty list). ``ValueError`` for anything else."""
    if not isinstance(runners, list):
        raise ValueError(f"'lst' is a {type(runners).__name__}, not RunResults' list of [runner name, results] pairs")
    for entry in runners:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
            shown = json.dumps(entry, default=lambda _: "<array>")[:100]
            raise ValueError(f"'lst' holds {shown}, not a [runner name, results] pair (Polygraphy RunResults)")
    return runners[0][1] if runners else []


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
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile) as exc:
        raise UsageError(f"Cannot read tensors from '{path}': {exc}") from exc
    except RecursionError as exc:
        raise UsageError(f"Cannot read tensors from '{path}': it is nested too deeply.") from exc
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

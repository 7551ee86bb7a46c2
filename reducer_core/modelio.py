"""Loading and writing models with weights by reference.

- ``load_model`` reads the graph without its external data and resolves every external-data
  location safely (relative, inside the model's folder, no symlinks): ``WeightSources`` maps each
  location to its real file.
- ``externalize_inline_weights`` moves large inline initializers, once, into one weights file,
  so every later iteration model is O(graph) to write.
- ``write_iteration_model`` writes a candidate model and hardlinks (or, across devices, copies
  once) the weight files beside it; onnxruntime refuses symlinked or absolute locations.
- ``save_self_contained`` writes a final model with exactly the weights it needs, inline, or in
  one ``<name>.data`` file when they exceed protobuf's 2 GB limit.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx

from reducer_core.errors import InvalidModelError, UnsafeExternalDataError

INLINE_LIMIT_BYTES = 1024
PROTOBUF_LIMIT_BYTES = 2_000_000_000 - 64 * 1024 * 1024


@dataclass
class WeightSources:
    """Location (as written in the model) -> resolved file path on disk."""

    files: dict[str, Path] = field(default_factory=dict)
    copies: dict[Path, Path] = field(default_factory=dict)
    """Weight copies already made (copy -> source), reused by later writes."""
    hardlink: bool = False
    """Hardlink weight files beside iteration models instead of copying them once per folder.
    Cheaper, but ``onnx.load(..., load_external_data=True)`` (and so tools built on it, e.g.
    ``polygraphy run --onnx-outputs mark all``) refuses weight files with several hardlinks."""


def _external_info(tensor: onnx.TensorProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in tensor.external_data}


def all_tensors(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """Initializers of the graph and of every nested body, and Constant-node tensors."""
    tensors = list(graph.initializer)
    for node in graph.node:
        tensors.extend(node_tensors(node))
    return tensors


def node_tensors(node: onnx.NodeProto) -> list[onnx.TensorProto]:
    """The tensors inside one node: tensor attributes (Constant) and everything in its bodies."""
    tensors: list[onnx.TensorProto] = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.TENSOR:
            tensors.append(attr.t)
        elif attr.type == onnx.AttributeProto.GRAPH:
            tensors.extend(all_tensors(attr.g))
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for sub in attr.graphs:
                tensors.extend(all_tensors(sub))
    return tensors


EXTERNAL_DATA_KEYS = ("location", "offset", "length", "checksum")


def check_external_keys(tensor: onnx.TensorProto) -> None:
    """The ONNX spec's external-data keys only: ``onnx.external_data_helper`` sets every key as an
    attribute of a Python object, so ``__class__`` or ``basepath`` would change what it does."""
    for entry in tensor.external_data:
        if entry.key not in EXTERNAL_DATA_KEYS:
            raise UnsafeExternalDataError(
                f"Tensor '{tensor.name[:200]}' has the external-data key '{entry.key[:100]}'; the allowed keys "
                f"are {', '.join(EXTERNAL_DATA_KEYS)}. Re-export the model "
                "(onnx.save_model(..., save_as_external_data=True))."
            )


def resolve_location(base_dir: Path, location: str) -> Path:
    """The file an external-data location names, refusing anything that escapes ``base_dir``."""
    if not location or os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location:
        raise UnsafeExternalDataError(
            f"External data location '{location}' is absolute; locations must be relative to the model's folder."
        )
    parts = Path(location).parts
    if ".." in parts:
        raise UnsafeExternalDataError(
            f"External data location '{location}' contains '..'; keep weight files inside the model's folder."
        )
    path = base_dir / location
    current = base_dir
    for part in parts:
        current = current / part
        if current.is_symlink():
            raise UnsafeExternalDataError(
                f"External data location '{location}' goes through a symlink ({current}); copy the real file instead."
            )
    if not path.is_file():
        raise InvalidModelError(
            f"External data file '{location}' was not found next to the model (looked in {base_dir}). "
            "Put the weight files beside the .onnx file, or pass --external-data-dir."
        )
    return path.resolve()


def _int_field(tensor: onnx.TensorProto, info: dict[str, str], key: str) -> int | None:
    if key not in info:
        return None
    try:
        return int(info[key])
    except ValueError:
        raise InvalidModelError(
            f"Tensor '{tensor.name}' has external-data {key} '{info[key]}', which is not a whole number. "
            "Re-export the model (onnx.save_model(..., save_as_external_data=True))."
        ) from None


_FOUR_BIT_TYPES = {
    getattr(onnx.TensorProto, name) for name in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(onnx.TensorProto, name)
}


def declared_nbytes(tensor: onnx.TensorProto) -> int | None:
    """Bytes the tensor's dims and dtype need (None for strings and unknown types)."""
    if tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    try:
        bits = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize * 8
    except (KeyError, TypeError, ValueError):
        return None
    if tensor.data_type in _FOUR_BIT_TYPES:
        bits = 4
    count = 1
    for dim in tensor.dims:
        count *= dim
    return (count * bits + 7) // 8


def check_external_bounds(tensor: onnx.TensorProto, path: Path) -> None:
    """Refuse external data that lies outside its file, or a shape that needs more bytes than are
    stored (a tensor bomb: a runtime would allocate the declared size)."""
    info = _external_info(tensor)
    offset, length = _int_field(tensor, info, "offset") or 0, _int_field(tensor, info, "length")
    size = path.stat().st_size
    end = offset + length if length is not None else size
    where = f"'{info.get('location')}'"
    if offset < 0 or offset > size or (length is not None and length < 0) or end > size:
        raise InvalidModelError(
            f"Tensor '{tensor.name}' claims bytes {offset}..{end} of {where}, but that file has {size} bytes. "
            "The model and its weight file do not belong together: re-export both, or give the right folder "
            "with --external-data-dir."
        )
    needed = declared_nbytes(tensor)
    if needed is not None and needed > end - offset:
        raise InvalidModelError(
            f"Tensor '{tensor.name}' has shape {list(tensor.dims)} ({needed} bytes) but only {end - offset} bytes "
            f"are stored for it in {where}. The model and its weight file do not belong together: re-export both."
        )


def load_model(
    path: str | Path, external_data_dir: str | Path | None = None, ignore_external_data: bool = False
) -> tuple[onnx.ModelProto, WeightSources]:
    """Load ``path`` without its weights; validate and resolve every external-data reference.

    ``ignore_external_data`` (Polygraphy's option): the structure only; external references are
    left unresolved, so the weights are neither read, linked nor copied."""
    path = Path(path)
    if not path.is_file():
        raise InvalidModelError(f"Model file '{path}' does not exist.")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and others
        raise InvalidModelError(
            f"'{path}' is not a readable ONNX model ({type(exc).__name__}: {exc}). Is the file truncated "
            "or not an .onnx file? Export or copy it again."
        ) from exc
    if not model.HasField("graph") or model.ir_version <= 0 or not model.opset_import:
        raise InvalidModelError(
            f"'{path}' is not a complete ONNX model (missing graph, IR version or opset imports); the file "
            "is probably truncated or not an .onnx file. Export or copy it again."
        )
    base_dir = Path(external_data_dir) if external_data_dir else path.parent
    sources = WeightSources()
    if ignore_external_data:
        return model, sources
    for tensor in all_tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        check_external_keys(tensor)
        location = _external_info(tensor).get("location", "")
        if location not in sources.files:
            sources.files[location] = resolve_location(base_dir.resolve(), location)
        check_external_bounds(tensor, sources.files[location])
    return model, sources


def weight_reader(sources: WeightSources) -> Callable[[onnx.TensorProto], np.ndarray]:
    """Reads an initializer's values, from its external-data file (``sources``) when it has one."""

    def read(tensor: onnx.TensorProto) -> np.ndarray:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            return onnx.numpy_helper.to_array(tensor)
        info = _external_info(tensor)
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
        count = int(np.prod(tensor.dims)) if tensor.dims else 1
        with open(sources.files[info.get("location", "")], "rb") as source:
            source.seek(int(info.get("offset", "0")))
            raw = source.read(count * dtype.itemsize)
        return np.frombuffer(raw, dtype).reshape(tuple(tensor.dims))

    return read


def _set_external(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.ClearField("raw_data")


def externalize_inline_weights(
    model: onnx.ModelProto, sources: WeightSources, weights_path: Path, location: str = "onnx_reducer.weights"
) -> int:
    """Move inline top-level initializers above INLINE_LIMIT_BYTES into ``weights_path`` (in place).

    Returns the number of bytes written. Done once per reduction, so iterations never copy weights.
    """
    movable = [
        t
        for t in model.graph.initializer
        if t.data_location != onnx.TensorProto.EXTERNAL
        and t.data_type != onnx.TensorProto.STRING
        and t.ByteSize() >= INLINE_LIMIT_BYTES
    ]
    if not movable:
        return 0
    written = 0
    # Append when the file already holds weights this model references (a second call).
    mode = "ab" if weights_path.resolve() in set(sources.files.values()) else "wb"
    with open(weights_path, mode) as sink:
        for tensor in movable:
            raw = onnx.numpy_helper.to_array(tensor).tobytes() if not tensor.HasField("raw_data") else tensor.raw_data
            offset = sink.tell()
            sink.write(raw)
            sink.write(b"\0" * (-len(raw) % 64))
            for name in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                tensor.ClearField(name)
            _set_external(tensor, location, offset, len(raw))
            written += len(raw)
    sources.files[location] = weights_path.resolve()
    return written


def _link_or_copy(source: Path, target: Path, sources: WeightSources) -> None:
    """Make ``target`` hold ``source``'s bytes, once: nothing when it is the same file, else a
    hardlink (``sources.hardlink``) or a copy that later writes to the same folder reuse. The
    source's own link count is never raised unless hardlinks were asked for."""
    reusable = target.exists() and not target.is_symlink()
    if reusable and (os.path.samefile(source, target) or sources.copies.get(target.resolve()) == source):
        return
    if target.exists() or target.is_symlink():
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    if sources.hardlink:
        try:
            os.link(source, target)
            return
        except OSError:
            pass  # another device: fall back to one copy
    tmp = target.with_name(target.name + ".tmp")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)
    sources.copies[target.resolve()] = source


def referenced_locations(model: onnx.ModelProto) -> set[str]:
    return tensor_locations(all_tensors(model.graph))


def tensor_locations(tensors: Iterable[onnx.TensorProto]) -> set[str]:
    """The external-data files (locations) that ``tensors`` point into."""
    return {_external_info(t).get("location", "") for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL}


def write_iteration_model(model: onnx.ModelProto, path: str | Path, sources: WeightSources) -> None:
    """Write ``model`` (weights still by reference) and make its weight files resolvable beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for location in referenced_locations(model):
        _link_or_copy(sources.files[location], path.parent / location, sources)
    _write_atomic(path, model.SerializeToString())


def write_iteration_bytes(data: bytes, path: str | Path, sources: WeightSources) -> None:
    """Write an already serialized iteration model; every weight file of ``sources`` is made
    resolvable beside it (the original model references them all, so after the first iteration
    this is what ``write_iteration_model`` leaves there too), without walking the model's tensors."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for location, source in sources.files.items():
        _link_or_copy(source, path.parent / location, sources)
    _write_atomic(path, data)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


COPY_CHUNK_BYTES = 64 * 1024 * 1024


def _external_span(tensor: onnx.TensorProto, sources: WeightSources) -> tuple[Path, int, int]:
    """(file, offset, length) of an external tensor's bytes."""
    info = _external_info(tensor)
    source = sources.files[info["location"]]
    offset = int(info.get("offset", 0))
    length = int(info["length"]) if "length" in info else source.stat().st_size - offset
    return source, offset, length


def _read_external(tensor: onnx.TensorProto, sources: WeightSources) -> bytes:
    source, offset, length = _external_span(tensor, sources)
    with open(source, "rb") as f:
        f.seek(offset)
        return f.read(length)


def _copy_range(source: Path, offset: int, length: int, sink: BinaryIO) -> None:
    """Append ``length`` bytes of ``source`` from ``offset`` to ``sink``, in bounded chunks."""
    with open(source, "rb") as f:
        f.seek(offset)
        left = length
        while left > 0:
            chunk = f.read(min(left, COPY_CHUNK_BYTES))
            if not chunk:
                raise InvalidModelError(f"Weight file '{source}' ended early (truncated while reducing?).")
            sink.write(chunk)
            left -= len(chunk)


def _resolvable_external(model: onnx.ModelProto, sources: WeightSources) -> list[onnx.TensorProto]:
    """External tensors whose weight file is known (all of them unless external data is ignored)."""
    return [
        t
        for t in all_tensors(model.graph)
        if t.data_location == onnx.TensorProto.EXTERNAL and _external_info(t).get("location") in sources.files
    ]


def inline_external_data(model: onnx.ModelProto, sources: WeightSources) -> None:
    """Read every external tensor's bytes into the model, in place (for runtimes and converters
    that need weights in memory). Locations were validated by ``load_model``."""
    for tensor in _resolvable_external(model, sources):
        raw = _read_external(tensor, sources)
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
        tensor.raw_data = raw


def load_model_with_weights(path: str | Path) -> onnx.ModelProto:
    """Load a model and its external weights through ``load_model``'s validation.

    Unlike ``onnx.load(..., load_external_data=True)``, this accepts weight files with several
    hardlinks, which is how iteration models reference the original weights."""
    model, sources = load_model(path)
    inline_external_data(model, sources)
    return model


@dataclass(frozen=True)
class SaveOptions:
    """Polygraphy's --save-external-data [PATH], --external-data-size-threshold and
    --no-save-all-tensors-to-one-file, for the models written at the end of a reduction."""

    external_location: str | None = None  # None: inline when possible; "": "<name>.data"
    size_threshold: int = INLINE_LIMIT_BYTES
    all_tensors_to_one_file: bool = True


def save_self_contained(
    model: onnx.ModelProto, path: str | Path, sources: WeightSources, options: SaveOptions | None = None
) -> Path | None:
    """Write ``model`` with its weights materialised: inline, or in ``<name>.data`` beside it when
    they exceed protobuf's 2 GB limit (copied in bounded chunks), or as ``options`` ask. Returns
    the data file written, if any.

    Files are written under temporary names and moved into place, so saving over the model being
    reduced (whose weights may be ``<name>.data`` themselves) never truncates its own source."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    options = options or SaveOptions()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    external = _resolvable_external(out, sources)
    total = sum(_external_span(t, sources)[2] for t in external) + out.ByteSize()
    if total >= PROTOBUF_LIMIT_BYTES:
        return _save_with_copied_data(out, path, sources, external, options.external_location or None)
    inline_external_data(out, sources)
    if options.external_location is None:
        _write_atomic(path, out.SerializeToString())
        return None
    location = options.external_location or f"{path.name}.data"
    onnx.save_model(
        out,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=options.all_tensors_to_one_file,
        location=location,
        size_threshold=options.size_threshold,
    )
    return path.with_name(location) if options.all_tensors_to_one_file else None


def _save_with_copied_data(
    out: onnx.ModelProto, path: Path, sources: WeightSources, external: list[onnx.TensorProto], location: str | None
) -> Path:
    """Over 2 GB: copy each tensor's bytes into one data file in bounded chunks."""
    data_path = path.with_name(location or path.name + ".data")
    tmp_data = data_path.with_name(data_path.name + ".tmp")
    with open(tmp_data, "wb") as sink:
        for tensor in external:
            source, offset, length = _external_span(tensor, sources)
            start = sink.tell()
            _copy_range(source, offset, length, sink)
            sink.write(b"\0" * (-length % 4096))
            _set_external(tensor, data_path.name, start, length)
    os.replace(tmp_data, data_path)
    _write_atomic(path, out.SerializeToString())
    return data_path


def relocate_external_data(model: onnx.ModelProto, sources: WeightSources, prefix: str) -> WeightSources:
    """Give every external weight file a reducer-owned link name (in place), so links written
    beside iteration models never collide with a user's own files."""
    mapping = {loc: f"{prefix}{i}_{Path(loc).name}" for i, loc in enumerate(sorted(sources.files))}
    for tensor in all_tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = mapping[entry.value]
    return WeightSources({mapping[loc]: path for loc, path in sources.files.items()})


def remove_links(directory: Path, sources: WeightSources) -> None:
    """Remove the weight links and copies ``write_iteration_model`` left in ``directory``; the
    source files themselves (e.g. a model's own weights, referenced in place) stay."""
    for location, source in sources.files.items():
        link = directory / location
        if not link.exists():
            continue
        if link.resolve() != source.resolve():  # a copy or a link, never the source file itself
            link.unlink()

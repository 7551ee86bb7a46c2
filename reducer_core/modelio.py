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
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from reducer_core.errors import InvalidModelError, UnsafeExternalDataError

INLINE_LIMIT_BYTES = 1024
PROTOBUF_LIMIT_BYTES = 2_000_000_000 - 64 * 1024 * 1024


@dataclass
class WeightSources:
    """Location (as written in the model) -> resolved file path on disk."""

    files: dict[str, Path] = field(default_factory=dict)


def _external_info(tensor: onnx.TensorProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in tensor.external_data}


def all_tensors(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """Initializers of the graph and of every nested body, and Constant-node tensors."""
    tensors = list(graph.initializer)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                tensors.append(attr.t)
            elif attr.type == onnx.AttributeProto.GRAPH:
                tensors.extend(all_tensors(attr.g))
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    tensors.extend(all_tensors(sub))
    return tensors


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


def check_external_bounds(tensor: onnx.TensorProto, path: Path) -> None:
    info = _external_info(tensor)
    offset, length = int(info.get("offset", 0)), info.get("length")
    size = path.stat().st_size
    end = offset + int(length) if length is not None else size
    if offset < 0 or end > size:
        raise InvalidModelError(
            f"Tensor '{tensor.name}' claims bytes {offset}..{end} of '{info.get('location')}', "
            f"but that file has {size} bytes. The model and its weight file do not belong together."
        )


def load_model(path: str | Path, external_data_dir: str | Path | None = None) -> tuple[onnx.ModelProto, WeightSources]:
    """Load ``path`` without its weights; validate and resolve every external-data reference."""
    path = Path(path)
    if not path.is_file():
        raise InvalidModelError(f"Model file '{path}' does not exist.")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and others
        raise InvalidModelError(f"'{path}' is not a readable ONNX model ({type(exc).__name__}: {exc}).") from exc
    base_dir = Path(external_data_dir) if external_data_dir else path.parent
    sources = WeightSources()
    for tensor in all_tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = _external_info(tensor).get("location", "")
        if location not in sources.files:
            sources.files[location] = resolve_location(base_dir.resolve(), location)
        check_external_bounds(tensor, sources.files[location])
    return model, sources


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
    written = 0
    with open(weights_path, "wb") as sink:
        for tensor in model.graph.initializer:
            if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.data_type == onnx.TensorProto.STRING:
                continue
            if tensor.ByteSize() < INLINE_LIMIT_BYTES:
                continue
            raw = onnx.numpy_helper.to_array(tensor).tobytes() if not tensor.HasField("raw_data") else tensor.raw_data
            offset = sink.tell()
            sink.write(raw)
            sink.write(b"\0" * (-len(raw) % 64))
            for name in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                tensor.ClearField(name)
            _set_external(tensor, location, offset, len(raw))
            written += len(raw)
    if written:
        sources.files[location] = weights_path.resolve()
    else:
        weights_path.unlink(missing_ok=True)
    return written


def _link_or_copy(source: Path, target: Path) -> None:
    if target.exists():
        if target.is_symlink() or not os.path.samefile(source, target):
            target.unlink()
        else:
            return
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def referenced_locations(model: onnx.ModelProto) -> set[str]:
    return {
        _external_info(t).get("location", "")
        for t in all_tensors(model.graph)
        if t.data_location == onnx.TensorProto.EXTERNAL
    }


def write_iteration_model(model: onnx.ModelProto, path: str | Path, sources: WeightSources) -> None:
    """Write ``model`` (weights still by reference) and make its weight files resolvable beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for location in referenced_locations(model):
        _link_or_copy(sources.files[location], path.parent / location)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, path)


def _read_external(tensor: onnx.TensorProto, sources: WeightSources) -> bytes:
    info = _external_info(tensor)
    offset = int(info.get("offset", 0))
    with open(sources.files[info["location"]], "rb") as f:
        f.seek(offset)
        return f.read(int(info["length"])) if "length" in info else f.read()


def save_self_contained(model: onnx.ModelProto, path: str | Path, sources: WeightSources) -> Path | None:
    """Write ``model`` with its weights materialised. Returns the external data file, if one was needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    external = [t for t in all_tensors(out.graph) if t.data_location == onnx.TensorProto.EXTERNAL]
    total = sum(int(_external_info(t).get("length", 0)) for t in external) + out.ByteSize()
    if total < PROTOBUF_LIMIT_BYTES:
        for tensor in external:
            raw = _read_external(tensor, sources)
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
            tensor.raw_data = raw
        path.write_bytes(out.SerializeToString())
        return None
    data_name = path.name + ".data"
    data_path = path.with_name(data_name)
    with open(data_path, "wb") as sink:
        for tensor in external:
            raw = _read_external(tensor, sources)
            offset = sink.tell()
            sink.write(raw)
            sink.write(b"\0" * (-len(raw) % 4096))
            _set_external(tensor, data_name, offset, len(raw))
    path.write_bytes(out.SerializeToString())
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
    """Remove the weight links ``write_iteration_model`` left in ``directory``."""
    for location in sources.files:
        link = directory / location
        if (link.exists() and link.resolve() != sources.files[location]) or (
            link.exists() and os.stat(link).st_nlink > 1
        ):
            link.unlink()

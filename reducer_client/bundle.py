"""A model given as a plain ``.onnx`` whose weights live in external-data files next to it is sent
as a tar bundle of the model and those files, so nobody has to pack it by hand."""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import onnx

from reducer_client.errors import ModelBundleError
from reducer_client.upload import FileSource, TarSource, UploadSource


def is_archive(path: Path) -> bool:
    """A ``.tar``/``.zip`` bundle the user packed (it is uploaded as it is)."""
    try:
        return zipfile.is_zipfile(path) or tarfile.is_tarfile(path)
    except OSError:
        return False


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _graph_tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from _graph_tensors(subgraph)


def external_data_locations(model: onnx.ModelProto) -> list[str]:
    """The ``location`` of every external-data tensor, each once, in order of first use."""
    seen: dict[str, None] = {}
    for tensor in _graph_tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            entries = {entry.key: entry.value for entry in tensor.external_data}
            seen.setdefault(entries.get("location", ""), None)
    return list(seen)


def _relative(location: str, model_path: Path) -> PurePosixPath:
    relative = PurePosixPath(location.replace("\\", "/"))
    if not location or relative.is_absolute() or ".." in relative.parts:
        raise ModelBundleError(
            f"{model_path.name} keeps weights in '{location}', outside its own folder. Save the model with "
            "its external data next to it (onnx.save(..., save_as_external_data=True, location='NAME')), "
            "or upload a .tar/.zip bundle."
        )
    return relative


def bundle_members(model_path: Path, locations: list[str]) -> list[tuple[str, Path]]:
    members = [(model_path.name, model_path)]
    for location in locations:
        relative = _relative(location, model_path)
        source = model_path.parent.joinpath(*relative.parts)
        if not source.is_file():
            raise ModelBundleError(
                f"{model_path.name} keeps weights in '{location}', which is not a file next to the model "
                f"(looked for {source}). Copy the external-data file there, or upload a .tar/.zip bundle."
            )
        members.append((str(relative), source))
    return members


def model_source(model_path: Path) -> UploadSource:
    """What to upload for ``model_path``: a bundle as it is; an ONNX model with external data as a tar of
    the model and its weight files; anything else as it is (the server validates it)."""
    if not model_path.is_file():
        raise FileNotFoundError(f"{model_path} is not a file.")
    if is_archive(model_path):
        return FileSource(model_path)
    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception:  # noqa: BLE001 - protobuf raises DecodeError and others
        return FileSource(model_path)  # not a model we can read: the server says what is wrong with it
    locations = external_data_locations(model)
    if not locations:
        return FileSource(model_path)
    return TarSource(f"{model_path.stem}.tar", bundle_members(model_path, locations))

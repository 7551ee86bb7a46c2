"""Validate an uploaded ``golden`` file (the form field) before a job exists: the zip that
``onnx-reducer golden`` writes, or Polygraphy JSON (inputs and/or layerwise outputs). Errors are
422 problems that name the field; nothing here writes anything.

A golden zip is never unpacked: the checks read it member by member. Its members are still held to
the bundle rules (relative names without '..', no symlinks, a cap on the unpacked total against zip
bombs), its manifest must be an onnx-reducer golden manifest whose every entry is a member, and
every entry must be a plain ``.npy`` array (no pickled objects)."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any, Literal

import onnx

from api.bundles import check_zip_members
from api.problems import ProblemError
from checks.golden import FORMAT, MANIFEST
from checks.user_inputs import check_golden_inputs
from reducer_core.errors import UsageError
from reducer_core.tensors import load_polygraphy_json, npy_nbytes

GoldenFormat = Literal["zip", "json"]
TITLE = "Invalid golden values"
LABEL = "Golden file (field 'golden')"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
HOW = (
    "Upload the file written by `onnx-reducer golden MODEL -o GOLDEN`, or Polygraphy JSON "
    "(`polygraphy run --save-inputs` / `--save-outputs`)."
)


def _invalid(detail: str) -> ProblemError:
    return ProblemError(422, TITLE, f"The 'golden' field: {detail} {HOW}")


def suffix_for(fmt: str) -> str:
    """The file name ending a check needs to read the stored golden file (``GoldenStore.open``)."""
    return ".json" if fmt == "json" else ".golden"


def validate_golden(path: Path, max_extracted_bytes: int) -> GoldenFormat:
    """The upload's format; raises ProblemError (422) when it is neither a readable golden zip nor
    Polygraphy JSON with at least one tensor. Nothing is decoded beyond ``max_extracted_bytes``:
    zip members and arrays are measured from their headers first."""
    if zipfile.is_zipfile(path):
        _validate_zip(path, max_extracted_bytes)
        return "zip"
    with open(path, "rb") as handle:
        head = handle.read(4096).lstrip()
    if head[:1] in (b"[", b"{"):
        _validate_json(path, max_extracted_bytes)
        return "json"
    raise _invalid("the upload is neither a golden-values zip nor a JSON document.")


def _validate_zip(path: Path, max_bytes: int) -> None:
    try:
        with zipfile.ZipFile(path) as archive:
            infos = {info.filename: info for info in check_zip_members(archive, max_bytes, LABEL, TITLE)}
            manifest = _manifest(archive, infos)
            for entry in manifest:
                _check_entry(archive, infos, entry)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise _invalid(f"the zip cannot be read ({exc}).") from exc


def _manifest(archive: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo]) -> list[str]:
    """The manifest's entries (member names)."""
    info = infos.get(MANIFEST)
    if info is None:
        raise _invalid(f"the zip has no {MANIFEST}, so it is not an onnx-reducer golden file.")
    if info.file_size > MAX_MANIFEST_BYTES:
        raise _invalid(f"its {MANIFEST} is larger than {MAX_MANIFEST_BYTES} bytes.")
    try:
        manifest: Any = json.loads(archive.read(info))
    except ValueError as exc:
        raise _invalid(f"its {MANIFEST} is not valid JSON ({exc}).") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise _invalid(f"its {MANIFEST} is not an onnx-reducer golden manifest (format {found!r}, want {FORMAT!r}).")
    tensors = manifest.get("tensors")
    if not isinstance(tensors, list) or not tensors:
        raise _invalid(f"its {MANIFEST} lists no tensors.")
    entries: list[str] = []
    for item in tensors:
        if not (isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("sample", "name", "entry"))):
            raise _invalid(f"its {MANIFEST} has a malformed tensor entry: {str(item)[:200]}.")
        if not item["sample"].isdigit():
            raise _invalid(f"its {MANIFEST} has a tensor with sample {item['sample'][:50]!r} (want a number).")
        entries.append(item["entry"])
    return entries


def _check_entry(archive: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo], entry: str) -> None:
    info = infos.get(entry)
    if info is None:
        raise _invalid(f"its {MANIFEST} names '{entry[:200]}', which is not in the zip.")
    try:
        with archive.open(info) as handle:
            nbytes = npy_nbytes(handle)
    except ValueError as exc:
        raise _invalid(f"member '{entry[:200]}' is not a plain NumPy .npy array ({exc}).") from exc
    if nbytes > info.file_size:
        raise _invalid(f"member '{entry[:200]}' declares {nbytes} bytes of data but holds {info.file_size}.")


def _validate_json(path: Path, max_bytes: int) -> None:
    try:
        samples = load_polygraphy_json(path, max_bytes)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise _invalid(f"the JSON is not Polygraphy tensor data ({type(exc).__name__}: {str(exc)[:300]}).") from exc
    if not samples:
        raise _invalid("the JSON holds no tensors.")


def check_golden_fits(path: Path, fmt: str, model_path: Path) -> None:
    """The golden file's inputs against the model's (name, shape, element type), before a job
    exists: 422 in one line naming the input, the model's shape and type and the file's."""
    readable = path.with_suffix(suffix_for(fmt))
    if not readable.exists():
        os.link(path, readable)
    try:
        check_golden_inputs(readable, onnx.load(str(model_path), load_external_data=False))
    except UsageError as exc:
        raise _invalid(str(exc)) from exc

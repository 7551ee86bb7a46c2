"""Validate the uploaded ``inputs`` files (the form field, repeatable) before a job exists: NumPy
``.npz`` (one sample each) or Polygraphy JSON (one sample per feed dict). Several files are several
samples, in the order sent; every input is checked against the model's inputs (name, shape, element
type) so that a job never starts with samples it cannot run. Errors are 422 problems that name the
field and the file as uploaded; nothing here writes beyond the request's staging folder.

An ``.npz`` is a zip: its members are held to the bundle rules (no '..', no symlinks, a cap on the
unpacked total) and each must be a plain ``.npy`` array before it is read."""

from __future__ import annotations

import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import onnx

from api.bundles import check_zip_members
from api.problems import ProblemError
from checks.user_inputs import INPUT_KINDS, load_user_samples
from reducer_core.errors import UsageError
from reducer_core.tensors import load_polygraphy_json, npy_nbytes

InputsFormat = Literal["npz", "json"]
TITLE = "Invalid input values"
LABEL = "Inputs file (field 'inputs')"
HOW = (
    "Upload NumPy .npz files (one sample each: one array per model input) or Polygraphy JSON "
    "(`polygraphy run --save-inputs`: a list of feed dicts, one sample each)."
)


@dataclass(frozen=True)
class StagedInputs:
    """The uploaded inputs files, renamed by format so that they can be read (``.npz``/``.json``)."""

    paths: list[Path]
    names: list[str]  # as uploaded
    formats: list[InputsFormat]


def _invalid(detail: str) -> ProblemError:
    return ProblemError(422, TITLE, f"The 'inputs' field: {detail}")


def suffix_for(fmt: str) -> str:
    return ".json" if fmt == "json" else ".npz"


def stage_inputs(files: list[tuple[Path, str]], max_bytes: int) -> StagedInputs:
    """Each ``(staged path, uploaded name)`` checked for its format (within ``max_bytes`` of
    arrays) and linked beside it with the suffix its reader needs."""
    paths: list[Path] = []
    names: list[str] = []
    formats: list[InputsFormat] = []
    for path, name in files:
        fmt = _format(path, name, max_bytes)
        target = path.with_suffix(suffix_for(fmt))
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
        paths.append(target)
        names.append(name)
        formats.append(fmt)
    return StagedInputs(paths, names, formats)


def _format(path: Path, name: str, max_bytes: int) -> InputsFormat:
    if zipfile.is_zipfile(path):
        _check_npz(path, name, max_bytes)
        return "npz"
    with open(path, "rb") as handle:
        head = handle.read(4096).lstrip()
    if head[:1] in (b"[", b"{"):
        try:
            samples = load_polygraphy_json(path, max_bytes)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise _invalid(
                f"'{name}' is not Polygraphy tensor data ({type(exc).__name__}: {str(exc)[:300]}). {HOW}"
            ) from exc
        if not samples:
            raise _invalid(f"'{name}' holds no tensors. {HOW}")
        return "json"
    raise _invalid(f"'{name}' is neither a NumPy .npz archive nor a JSON document. {HOW}")


def _check_npz(path: Path, name: str, max_bytes: int) -> None:
    try:
        with zipfile.ZipFile(path) as archive:
            for info in check_zip_members(archive, max_bytes, LABEL, TITLE):
                with archive.open(info) as handle:
                    nbytes = npy_nbytes(handle)
                if nbytes > info.file_size:
                    raise _invalid(f"'{name}': member '{info.filename[:200]}' declares more data than it holds.")
    except ValueError as exc:
        raise _invalid(f"'{name}' holds something other than plain NumPy arrays ({exc}). {HOW}") from exc
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise _invalid(f"'{name}' cannot be read as an .npz archive ({exc}). {HOW}") from exc


def validate_inputs(staged: StagedInputs, model_path: Path, spec_kind: str, has_golden: bool) -> int:
    """The number of samples; 422 when the inputs cannot be honoured: another spec kind than one
    that feeds inputs, golden values besides, or an input whose name, shape or type the model does
    not have (one line naming the input, the model's shape and type and the file's)."""
    if spec_kind not in INPUT_KINDS:
        raise _invalid(
            f"kind '{spec_kind}' runs no inputs of ours, so the samples would be ignored; use kind compare, golden "
            "or error, or leave the 'inputs' field out."
        )
    if has_golden:
        raise _invalid(
            "the 'golden' field gives the check's samples too; make golden values from the inputs "
            "(`onnx-reducer golden MODEL -o GOLDEN --load-inputs FILE...`) and upload only them, or only the inputs."
        )
    model = onnx.load(str(model_path), load_external_data=False)
    try:
        loaded = load_user_samples(staged.paths, model, names=staged.names)
    except UsageError as exc:
        raise _invalid(str(exc)) from exc
    return len(loaded)

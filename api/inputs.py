"""Validate the uploaded ``inputs`` files (the form field, repeatable) before a job exists: NumPy
``.npz`` (one sample each) or Polygraphy JSON (one sample per feed dict). Several files are several
samples, in the order sent; every input is checked against the model's inputs (name, shape, element
type) so that a job never starts with samples it cannot run. Errors are 422 problems that name the
field and the file as uploaded; nothing here writes beyond the request's staging folder.

An ``.npz`` is a zip: its members are held to the bundle rules (no '..', no symlinks, a cap on the
unpacked total) and each must be a plain ``.npy`` array. Nothing is decoded here: every array is
read from its header (an ``.npz`` member is inflated no further, a JSON payload's first bytes
only), its size charged to one budget for all files of the upload (golden values included,
``api.inspection``) and checked against the model as a data-less stand-in of its shape and type; a
JSON file with more values than its size explains is refused before it is parsed. So a refused
upload never costs the intake process more than a few times its size in memory."""

from __future__ import annotations

import math
import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import onnx

from api.bundles import charge_zip_members, check_zip_member_count, check_zip_members
from api.problems import ProblemError
from checks.user_inputs import INPUT_KINDS
from reducer_core.errors import UsageError
from reducer_core.samples import check_input_samples, input_samples, input_signatures, model_tensor_names
from reducer_core.tensors import BudgetExceededError, ByteBudget, TensorMap, load_polygraphy_json, npy_header, stand_in

InputsFormat = Literal["npz", "json"]
MIN_JSON_ELEMENTS = 10_000
JSON_BYTES_PER_ELEMENT = 32  # a legitimate Polygraphy JSON holds a few values per base64 array
TITLE = "Invalid input values"
LABEL = "Inputs file (field 'inputs')"
HOW = (
    "Upload NumPy .npz files (one sample each: one array per model input) or Polygraphy JSON "
    "(`polygraphy run --save-inputs`: a list of feed dicts, one sample each)."
)


@dataclass(frozen=True)
class StagedInputs:
    """The uploaded inputs files, renamed by format so that they can be read (``.npz``/``.json``),
    with each file's samples as data-less stand-ins (``reducer_core.tensors.stand_in``: the shapes
    and element types their headers declare; no array is decoded at intake)."""

    paths: list[Path]
    names: list[str]  # as uploaded
    formats: list[InputsFormat]
    headers: list[list[TensorMap]]


def _invalid(detail: str) -> ProblemError:
    return ProblemError(422, TITLE, f"The 'inputs' field: {detail}")


def _over_budget(name: str, exc: BudgetExceededError) -> ProblemError:
    return _invalid(
        f"'{name}': {exc}: the upload's golden values and input samples together may decode to no more. "
        "Send fewer or smaller samples."
    )


def suffix_for(fmt: str) -> str:
    return ".json" if fmt == "json" else ".npz"


def json_element_limit(size: int) -> int:
    """How many JSON values (lists, objects, items) a JSON file of ``size`` bytes may hold: parsed,
    each costs tens of bytes, so ``[],[],...`` would need many times the file's size in memory."""
    return max(MIN_JSON_ELEMENTS, size // JSON_BYTES_PER_ELEMENT)


def stage_inputs(files: list[tuple[Path, str]], budget: ByteBudget) -> StagedInputs:
    """Each ``(staged path, uploaded name)`` checked for its format and linked beside it with the
    suffix its reader needs. Every array is measured from its header and charged to ``budget``
    (one budget for all files of the upload) before the next is read; none is decoded."""
    paths: list[Path] = []
    names: list[str] = []
    formats: list[InputsFormat] = []
    headers: list[list[TensorMap]] = []
    for path, name in files:
        fmt, samples = _read_headers(path, name, budget)
        target = path.with_suffix(suffix_for(fmt))
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
        paths.append(target)
        names.append(name)
        formats.append(fmt)
        headers.append(samples)
    return StagedInputs(paths, names, formats, headers)


def _read_headers(path: Path, name: str, budget: ByteBudget) -> tuple[InputsFormat, list[TensorMap]]:
    if zipfile.is_zipfile(path):
        return "npz", [_npz_headers(path, name, budget)]
    with open(path, "rb") as handle:
        head = handle.read(4096).lstrip()
    if head[:1] in (b"[", b"{"):
        limit = json_element_limit(path.stat().st_size)
        try:
            samples = load_polygraphy_json(path, budget=budget, headers_only=True, max_elements=limit)
        except BudgetExceededError as exc:
            raise _over_budget(name, exc) from exc
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise _invalid(
                f"'{name}' is not Polygraphy tensor data ({type(exc).__name__}: {str(exc)[:300]}). {HOW}"
            ) from exc
        if not samples:
            raise _invalid(f"'{name}' holds no tensors. {HOW}")
        return "json", samples
    raise _invalid(f"'{name}' is neither a NumPy .npz archive nor a JSON document. {HOW}")


def _npz_headers(path: Path, name: str, budget: ByteBudget) -> TensorMap:
    """The archive's arrays as stand-ins, each read from its ``.npy`` header (the member is
    inflated no further) and charged to ``budget``."""
    sample: TensorMap = {}
    try:
        if (why := check_zip_member_count(path, f"'{name}'")) is not None:
            raise _invalid(f"{why}. {HOW}")
        with zipfile.ZipFile(path) as archive:
            infos = check_zip_members(archive, 1 << 62, LABEL, TITLE)  # (names, symlinks; sizes below)
            charge_zip_members(infos, budget)
            for info in infos:
                if info.is_dir():
                    continue
                with archive.open(info) as handle:
                    shape, dtype = npy_header(handle)
                nbytes = math.prod(shape) * dtype.itemsize
                if nbytes > info.file_size:
                    raise _invalid(f"'{name}': member '{info.filename[:200]}' declares more data than it holds.")
                budget.charge(nbytes)
                key = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else info.filename
                sample[key] = stand_in(shape, dtype)
    except BudgetExceededError as exc:
        raise _over_budget(name, exc) from exc
    except ValueError as exc:
        raise _invalid(f"'{name}' holds something other than plain NumPy arrays ({exc}). {HOW}") from exc
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise _invalid(f"'{name}' cannot be read as an .npz archive ({exc}). {HOW}") from exc
    return sample


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
    signatures = input_signatures(model)
    try:
        loaded = input_samples(
            list(zip(staged.names, staged.headers, strict=True)), list(signatures), model_tensor_names(model)
        )
        check_input_samples(loaded, signatures)
    except UsageError as exc:
        raise _invalid(str(exc)) from exc
    return len(loaded.samples)

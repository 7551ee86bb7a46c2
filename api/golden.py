"""Validate an uploaded ``golden`` file (the form field) before a job exists: the zip that
``onnx-reducer golden`` writes, or Polygraphy JSON (inputs and/or layerwise outputs). Errors are
422 problems that name the field; nothing here writes anything.

A golden zip is never unpacked: the checks read it member by member. Its members are still held to
the bundle rules (relative names without '..', no symlinks, a cap on the unpacked total against zip
bombs), its manifest must be an onnx-reducer golden manifest whose every entry is a member, and
every entry must be a plain ``.npy`` array (no pickled objects). Nothing is decoded at intake:
arrays are read from their headers, charged to the upload's one budget (``api.inputs``) and checked
against the model's inputs as data-less stand-ins."""

from __future__ import annotations

import json
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx

from api.bundles import charge_zip_members, check_zip_member_count, check_zip_members
from api.inputs import json_element_limit
from api.problems import ProblemError
from checks.golden import FORMAT, MANIFEST
from reducer_core.errors import UsageError
from reducer_core.samples import InputSamples, check_input_samples, input_signatures
from reducer_core.tensors import BudgetExceededError, ByteBudget, TensorMap, load_polygraphy_json, npy_header, stand_in

GoldenFormat = Literal["zip", "json"]
TITLE = "Invalid golden values"
LABEL = "Golden file (field 'golden')"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MAX_SAMPLE_DIGITS = 9
HOW = (
    "Upload the file written by `onnx-reducer golden MODEL -o GOLDEN`, or Polygraphy JSON "
    "(`polygraphy run --save-inputs` / `--save-outputs`)."
)


def _invalid(detail: str) -> ProblemError:
    return ProblemError(422, TITLE, f"The 'golden' field: {detail} {HOW}")


def suffix_for(fmt: str) -> str:
    """The file name ending a check needs to read the stored golden file (``GoldenStore.open``)."""
    return ".json" if fmt == "json" else ".golden"


@dataclass(frozen=True)
class GoldenHeaders:
    """An uploaded golden file's format and, per sample, its tensors as data-less stand-ins (the
    shapes and element types their headers declare: ``reducer_core.tensors.stand_in``)."""

    format: GoldenFormat
    samples: list[TensorMap]


def validate_golden(path: Path, budget: ByteBudget) -> GoldenHeaders:
    """The upload's format and tensor headers; raises ProblemError (422) when it is neither a
    readable golden zip nor Polygraphy JSON with at least one tensor. Nothing is decoded: zip
    members and arrays are measured from their headers and charged to ``budget`` (shared with the
    upload's input samples); a JSON document with more values than its size explains is refused
    before it is parsed."""
    what = "the golden zip"
    try:
        if zipfile.is_zipfile(path):
            return GoldenHeaders("zip", _validate_zip(path, budget))
        what = "the golden JSON"
        with open(path, "rb") as handle:
            head = handle.read(4096).lstrip()
        if head[:1] in (b"[", b"{"):
            return GoldenHeaders("json", _validate_json(path, budget))
    except BudgetExceededError as exc:
        raise _invalid(
            f"{what}: {exc}: the upload's golden values and input samples together may decode to no more; "
            "send fewer or smaller samples."
        ) from exc
    raise _invalid("the upload is neither a golden-values zip nor a JSON document.")


def _validate_zip(path: Path, budget: ByteBudget) -> list[TensorMap]:
    try:
        if (why := check_zip_member_count(path, "the zip")) is not None:
            raise _invalid(f"{why}.")
        with zipfile.ZipFile(path) as archive:
            members = check_zip_members(archive, 1 << 62, LABEL, TITLE)  # (names, symlinks; sizes below)
            charge_zip_members(members, budget)
            infos = {info.filename: info for info in members}
            index: dict[int, TensorMap] = {}
            for sample, name, entry in _manifest(archive, infos):
                index.setdefault(sample, {})[name] = _check_entry(archive, infos, entry, budget)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise _invalid(f"the zip cannot be read ({exc}).") from exc
    return [index.get(i, {}) for i in range(max(len(index), 1))]  # (as checks.golden reads them)


def _manifest(archive: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo]) -> list[tuple[int, str, str]]:
    """The manifest's entries: (sample, tensor name, member name)."""
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
    entries: list[tuple[int, str, str]] = []
    for item in tensors:
        if not (isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("sample", "name", "entry"))):
            raise _invalid(f"its {MANIFEST} has a malformed tensor entry: {str(item)[:200]}.")
        if not item["sample"].isdigit() or len(item["sample"]) > MAX_SAMPLE_DIGITS:
            raise _invalid(f"its {MANIFEST} has a tensor with sample {item['sample'][:50]!r} (want a number).")
        entries.append((int(item["sample"]), item["name"], item["entry"]))
    return entries


def _check_entry(
    archive: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo], entry: str, budget: ByteBudget
) -> np.ndarray:
    info = infos.get(entry)
    if info is None:
        raise _invalid(f"its {MANIFEST} names '{entry[:200]}', which is not in the zip.")
    try:
        with archive.open(info) as handle:
            shape, dtype = npy_header(handle)
    except ValueError as exc:
        raise _invalid(f"member '{entry[:200]}' is not a plain NumPy .npy array ({exc}).") from exc
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > info.file_size:
        raise _invalid(f"member '{entry[:200]}' declares {nbytes} bytes of data but holds {info.file_size}.")
    budget.charge(nbytes)
    return stand_in(shape, dtype)


def _validate_json(path: Path, budget: ByteBudget) -> list[TensorMap]:
    limit = json_element_limit(path.stat().st_size)
    try:
        samples = load_polygraphy_json(path, budget=budget, headers_only=True, max_elements=limit)
    except BudgetExceededError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise _invalid(f"the JSON is not Polygraphy tensor data ({type(exc).__name__}: {str(exc)[:300]}).") from exc
    if not samples:
        raise _invalid("the JSON holds no tensors.")
    return samples


def check_golden_fits(golden: GoldenHeaders, model_path: Path) -> None:
    """The golden file's inputs against the model's (name, shape, element type), before a job
    exists: 422 in one line naming the input, the model's shape and type and the file's."""
    signatures = input_signatures(onnx.load(str(model_path), load_external_data=False))
    samples = [{name: s[name] for name in signatures if name in s} for s in golden.samples]
    labels = [f"golden#{i}" if len(samples) > 1 else "golden" for i in range(len(samples))]
    try:
        check_input_samples(InputSamples(samples, labels), signatures)
    except UsageError as exc:
        raise _invalid(str(exc)) from exc

"""The CPU-heavy half of ``POST /v1/jobs``, run in an intake worker process (``api.intake_pool``),
never on the api's event loop: parse and bound the check spec, validate the golden values, unpack a
bundle and validate the model (parse, node count, declared and inferred sizes, cycles, checker).

It reads and writes only the request's staging folder and returns an ``Inspection`` or a
``Refusal`` (plain data, so it crosses the process boundary). Messages name files as the user
uploaded them: staging paths are scrubbed from every refusal."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from api.bundles import extract_bundle, find_model, is_bundle
from api.golden import check_golden_fits, validate_golden
from api.inputs import stage_inputs, validate_inputs
from api.passes_answers import passes_options
from api.problems import ProblemError, about_field, field_errors
from api.release_answers import release_options
from api.validation import validate_model
from checks.build import build_check
from checks.mixed_precision import require_fp16_target
from checks.requirements import Requirements
from checks.spec import INTERACTIVE_KIND, CheckSpec, CheckSpecError, parse_service_spec
from checks.user_inputs import INPUT_KINDS
from persistence.enums import JobTask
from persistence.options import JobOptions
from persistence.stored_spec import normalised
from reducer_core.errors import UsageError
from reducer_core.strategies import MODES
from reducer_core.tensors import ByteBudget

GOLDEN_FLOOR_BYTES = 64 * 1024**2  # what golden JSON may decode to at least (NPZ payloads inflate)


@dataclass(frozen=True)
class UploadLimits:
    """The api settings the inspection needs (a plain copy: it crosses the process boundary)."""

    max_extracted_bytes: int
    max_bundle_members: int
    max_model_nodes: int
    declared_bytes_floor: int
    declared_bytes_factor: int
    allow_command_checks: bool
    job_time_limit_s: float


@dataclass(frozen=True)
class InspectRequest:
    staging: Path
    upload: Path
    filename: str
    size: int
    fields: dict[str, str]
    golden: Path | None
    golden_size: int
    limits: UploadLimits
    inputs: list[tuple[Path, str]] = field(default_factory=list)  # (staged file, uploaded name), in order


@dataclass(frozen=True)
class Inspection:
    model_relative: str  # the model inside ``staging/model``, POSIX
    bundle: bool
    nodes: int
    spec_kind: str
    needs_gpu: bool
    options: JobOptions  # the mode too
    golden_format: str | None
    inputs_formats: list[str] = field(default_factory=list)  # per 'inputs' file: npz | json
    samples: int = 0  # the samples the 'inputs' files give
    requires: Requirements = field(default_factory=Requirements)  # the spec's, parsed here once (``jobs.requires``)
    spec: dict[str, Any] | None = None  # the spec normalised here, stored parsed (``jobs.spec``); None: interactive


@dataclass(frozen=True)
class Refusal:
    """A problem for the client (``ProblemError``'s fields)."""

    status: int
    title: str
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)

    def error(self) -> ProblemError:
        return ProblemError(self.status, self.title, self.detail, **self.extra)


def safe_filename(name: str, default: str = "model.onnx") -> str:
    base = PurePosixPath(name.replace("\\", "/")).name
    cleaned = "".join(c for c in base if c.isalnum() or c in "._-")[:100].lstrip(".")
    return cleaned or default


def warm_up() -> int:
    """A no-op for a fresh intake process: importing this module is the work (onnx, numpy...)."""
    return os.getpid()


def inspect_upload(request: InspectRequest) -> Inspection | Refusal:
    """Everything about the upload that needs no database; never raises for a bad upload."""
    try:
        return _inspect(request)
    except ProblemError as exc:
        extra = dict(exc.extra)
        if isinstance(extra.get("errors"), list):
            extra["errors"] = [
                {**e, "message": scrub(str(e.get("message", "")), request.staging)} for e in extra["errors"]
            ]
        return Refusal(exc.status, exc.title, scrub(exc.detail, request.staging), extra)
    except RecursionError:
        return Refusal(422, "Invalid upload", "The upload is nested too deeply to read.")
    except MemoryError:
        return Refusal(422, "Invalid upload", "Reading the upload needs more memory than this server allows.")


def scrub(text: str, staging: Path) -> str:
    """``text`` without this server's staging paths: a bundle's files by their name in the bundle,
    the folder itself as 'the upload'."""
    model_dir = staging / "model"
    for folder in {model_dir, model_dir.resolve()}:
        text = text.replace(f"{folder}{os.sep}", "").replace(str(folder), "the uploaded model's folder")
    for folder in {staging, staging.resolve()}:
        text = text.replace(f"{folder}{os.sep}", "").replace(str(folder), "the upload")
    return text


def _inspect(request: InspectRequest) -> Inspection:
    limits = request.limits
    with about_field("check_spec"):
        spec = _parse_spec(request)
    kind, needs_gpu = (spec.kind, spec.needs_gpu) if spec is not None else (INTERACTIVE_KIND, False)
    with about_field("mode"):
        options = form_options(request.fields, interactive=spec is None)
    with about_field("task"):
        options = replace(options, **_task(request.fields, spec))
    budget = tensors_budget(request)
    golden = None
    if request.golden is not None:
        with about_field("golden"):
            golden = validate_golden(request.golden, budget)
    with about_field("model"):
        model_path, bundle = _unpack(request)
        try:
            nodes = validate_model(
                model_path,
                request.size,
                limits.declared_bytes_floor,
                limits.declared_bytes_factor,
                limits.max_model_nodes,
                spec,
            )
        except ProblemError as exc:
            if not bundle:  # the model is stored under a cleaned name ending in .onnx: say the one uploaded
                exc.detail = _as_uploaded(exc.detail, model_path, request.filename)
            raise
    if golden is not None and kind in INPUT_KINDS:
        with about_field("golden"):
            check_golden_fits(golden, model_path)
    formats: list[str] = []
    samples = 0
    if request.inputs:
        with about_field("inputs"):
            staged = stage_inputs(request.inputs, budget)
            samples = validate_inputs(staged, model_path, kind, request.golden is not None)
            formats = list(staged.formats)
    relative = model_path.relative_to(request.staging / "model").as_posix()
    golden_format = golden.format if golden is not None else None
    requires = spec.requires if spec is not None else Requirements()
    return Inspection(
        relative, bundle, nodes, kind, needs_gpu, options, golden_format, formats, samples, requires, normalised(spec)
    )


def tensors_budget(request: InspectRequest) -> ByteBudget:
    """One budget for the arrays of all the upload's tensor files together (golden values and every
    input sample), sized by the whole upload (``budget_for``): eight small files that each inflate
    to a large array are refused as one upload, from their headers, before any array is decoded."""
    total = request.size + request.golden_size + sum(path.stat().st_size for path, _ in request.inputs)
    return ByteBudget(budget_for(request.limits, total), "the upload's tensors")


def budget_for(limits: UploadLimits, size: int) -> int:
    """What uploaded tensors may decode to: the extraction limit, at least a floor (NPZ inflates)."""
    return min(limits.max_extracted_bytes, max(GOLDEN_FLOOR_BYTES, limits.declared_bytes_factor * size))


def _parse_spec(request: InspectRequest) -> CheckSpec | None:
    """The job's check spec; None for ``kind: interactive`` (a person answers every check)."""
    text = request.fields.get("check_spec", "").strip()
    if not text:
        raise ProblemError(422, "Invalid check spec", "The form needs a 'check_spec' field (YAML or JSON text).")
    try:
        spec = parse_service_spec(text)  # the one parse of the text: stored parsed (``persistence.stored_spec``)
    except CheckSpecError as exc:
        raise ProblemError(422, "Invalid check spec", str(exc)) from exc
    if spec is None:
        _refuse_golden_for_interactive(request)
        return None
    limit = request.limits.job_time_limit_s
    if spec.timeout * spec.repeat > limit:
        raise ProblemError(
            422,
            "Invalid check spec",
            f"timeout: {spec.timeout:g} s x repeat {spec.repeat} is longer than this server's job time limit "
            f"({limit:g} s, JOB_TIME_LIMIT_S); lower timeout or repeat.",
        )
    if spec.kind == "golden" and request.golden is None and not request.inputs:
        detail = (
            "kind: 'golden' compares against stored values: upload them in the 'golden' file field "
            "(the file written by `onnx-reducer golden MODEL -o GOLDEN`, or Polygraphy JSON), or upload input "
            "samples in the 'inputs' field (their golden values are computed on onnxruntime CPU)."
        )
        raise ProblemError(422, "Invalid check spec", detail, errors=field_errors("golden", detail))
    golden = request.golden.with_suffix(".golden") if request.golden is not None else None
    if golden is None and request.inputs:
        golden = request.staging / "inputs.golden"  # made from the inputs by the worker
    try:
        build_check(spec, golden=golden, allow_command=request.limits.allow_command_checks)
    except CheckSpecError as exc:
        raise ProblemError(422, "Invalid check spec", str(exc)) from exc
    return spec


def _task(fields: dict[str, str], spec: CheckSpec | None) -> dict[str, Any]:
    """The ``JobOptions`` fields of the ``task`` field: none for ``reduce`` (the default),
    ``{"task": JobTask.PRECISION}`` when the spec can run a precision job."""
    raw = fields.get("task", "").strip() or JobOptions.task.value
    if raw not in tuple(JobTask):
        detail = f"task must be one of {', '.join(JobTask)}, not '{raw[:50]}'."
        raise ProblemError(422, "Invalid option", detail, errors=field_errors("task", detail))
    allow_nonfinite = _allow_nonfinite(fields, raw)
    if raw == JobTask.REDUCE.value:
        return {}
    if raw == JobTask.BISECT_RELEASES.value:
        return release_options(fields, spec)
    if raw == JobTask.BISECT_PASSES.value:
        return passes_options(spec)
    if spec is None:
        detail = (
            "task precision needs an automatic check spec (kind compare, golden or error), not kind: 'interactive'."
        )
        raise ProblemError(422, "Invalid option", detail, errors=field_errors("task", detail))
    try:
        require_fp16_target(spec)
    except UsageError as exc:
        raise ProblemError(422, "Invalid check spec", str(exc), errors=field_errors("check_spec", str(exc))) from exc
    return {"task": JobTask(raw), "allow_nonfinite": allow_nonfinite}


def _allow_nonfinite(fields: dict[str, str], task: str) -> bool:
    """The ``allow_nonfinite`` field (the CLI's ``precision --allow-nonfinite``): a precision job
    then keeps the search's answer even where an fp16 tensor of the written model holds inf (by
    default the answer grows until none does). Off when left out; 422 for another task."""
    raw = fields.get("allow_nonfinite", str(JobOptions.allow_nonfinite).lower()).strip().lower()
    if raw not in ("true", "false", "1", "0"):
        detail = f"allow_nonfinite must be true or false, not '{raw[:50]}'."
        raise ProblemError(422, "Invalid option", detail, errors=field_errors("allow_nonfinite", detail))
    allow = raw in ("true", "1")
    if allow and task != JobTask.PRECISION.value:
        detail = f"allow_nonfinite applies to task precision only (this job's task is {task}); leave it out."
        raise ProblemError(422, "Invalid option", detail, errors=field_errors("allow_nonfinite", detail))
    return allow


def _refuse_golden_for_interactive(request: InspectRequest) -> None:
    if request.golden is not None:
        detail = (
            "kind: 'interactive' uses no golden values (you judge each model yourself); leave the 'golden' field out."
        )
        raise ProblemError(422, "Invalid check spec", detail, errors=field_errors("golden", detail))


def form_options(fields: dict[str, str], interactive: bool = False) -> JobOptions:
    """The form's mode and true/false options (``REDUCE_FLAGS``), each left out taking the
    default of a new job (``JobOptions.for_new_job``: ``confirm_flaky`` off for an interactive one)."""
    defaults = JobOptions.for_new_job(interactive)
    mode = fields.get("mode", "").strip() or defaults.mode
    if mode not in MODES:
        raise ProblemError(422, "Invalid mode", f"mode '{mode[:50]}' is not one of: {', '.join(MODES)}.")

    def flag(name: str) -> bool:
        raw = fields.get(name, str(getattr(defaults, name)).lower()).strip().lower()
        if raw not in ("true", "false", "1", "0"):
            detail = f"{name} must be true or false, not '{raw[:50]}'."
            raise ProblemError(422, "Invalid option", detail, errors=field_errors(name, detail))
        return raw in ("true", "1")

    return replace(
        defaults,
        mode=mode,
        reduce_inputs=flag("reduce_inputs"),
        reduce_outputs=flag("reduce_outputs"),
        pin_signature=flag("pin_signature"),
        confirm_flaky=flag("confirm_flaky"),
        reduce_data=flag("reduce_data"),
    )


def _as_uploaded(detail: str, stored: Path, filename: str) -> str:
    """``detail`` naming the model as it was uploaded ('report.pdf'), not as it was stored
    ('report.pdf.onnx', or 'mymodel1.onnx' for 'my model (1).onnx')."""
    uploaded = PurePosixPath(filename.replace("\\", "/")).name[:200] or stored.name
    for path in {stored, stored.resolve()}:
        detail = detail.replace(str(path), uploaded)
    return detail


def _unpack(request: InspectRequest) -> tuple[Path, bool]:
    model_dir = request.staging / "model"
    limits = request.limits
    if is_bundle(request.upload):
        extract_bundle(request.upload, model_dir, limits.max_extracted_bytes, limits.max_bundle_members)
        return find_model(model_dir, request.fields.get("model_path", "").strip() or None), True
    model_dir.mkdir()
    target = model_dir / safe_filename(request.filename)
    if target.suffix != ".onnx":
        target = target.with_name(target.name + ".onnx")
    try:
        os.link(request.upload, target)  # the stored original and the job's model share the bytes
    except OSError:
        shutil.copyfile(request.upload, target)
    return target, False

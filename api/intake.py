"""``POST /v1/jobs`` behind the route: stream the upload, unpack a bundle safely, validate model and
check spec, then store the original and create the job in one commit. Whatever fails on the way
leaves nothing behind (no job row, no blob, no folder)."""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from fastapi import Request
from sqlalchemy.exc import IntegrityError

from api.bundles import extract_bundle, find_model, is_bundle
from api.golden import suffix_for, validate_golden
from api.problems import ProblemError, about_field, field_errors
from api.services import Services
from api.uploads import UploadedForm, read_form
from api.validation import validate_model
from checks.spec import CheckSpec, CheckSpecError, build_check, parse_check_spec
from persistence.contracts import queue_for
from persistence.enums import ArtifactKind, EventKind, JobStatus
from persistence.models import Job, Team, new_id
from persistence.repositories import ArtifactRepository, EventRepository, JobRepository
from persistence.store import StoredBlob
from reducer_core.strategies import MODES

_BOOL_FIELDS = ("reduce_inputs", "reduce_outputs", "pin_signature")


@dataclass
class Intake:
    job_id: str
    queue: str
    created: bool


def _parse_spec(form: UploadedForm, allow_command: bool) -> CheckSpec:
    text = form.fields.get("check_spec", "").strip()
    if not text:
        raise ProblemError(422, "Invalid check spec", "The form needs a 'check_spec' field (YAML or JSON text).")
    try:
        spec = parse_check_spec(text)
    except CheckSpecError as exc:
        raise ProblemError(422, "Invalid check spec", str(exc)) from exc
    if spec.kind == "golden" and form.golden is None:
        detail = (
            "kind: 'golden' compares against stored values: upload them in the 'golden' file field "
            "(the file written by `onnx-reducer golden MODEL -o GOLDEN`, or Polygraphy JSON)."
        )
        raise ProblemError(422, "Invalid check spec", detail, errors=field_errors("golden", detail))
    golden = form.golden.path.with_suffix(".golden") if form.golden is not None else None
    try:
        build_check(spec, golden=golden, allow_command=allow_command)
    except CheckSpecError as exc:
        raise ProblemError(422, "Invalid check spec", str(exc)) from exc
    return spec


def _options(form: UploadedForm) -> tuple[str, dict[str, Any]]:
    mode = form.fields.get("mode", "auto").strip() or "auto"
    if mode not in MODES:
        raise ProblemError(422, "Invalid mode", f"mode '{mode}' is not one of: {', '.join(MODES)}.")
    options: dict[str, Any] = {}
    for name in _BOOL_FIELDS:
        raw = form.fields.get(name, "true").strip().lower()
        if raw not in ("true", "false", "1", "0"):
            detail = f"{name} must be true or false, not '{raw}'."
            raise ProblemError(422, "Invalid option", detail, errors=field_errors(name, detail))
        options[name] = raw in ("true", "1")
    return mode, options


def _safe_filename(name: str, default: str = "model.onnx") -> str:
    base = PurePosixPath(name.replace("\\", "/")).name
    cleaned = "".join(c for c in base if c.isalnum() or c in "._-")[:100].lstrip(".")
    return cleaned or default


class JobIntake:
    def __init__(self, services: Services, team: Team) -> None:
        self.services, self.team = services, team
        self.settings = services.settings
        self.staging = services.layout.staging_dir() / uuid.uuid4().hex
        self.job_dir: Path | None = None
        self.blob: StoredBlob | None = None
        self.golden_blob: StoredBlob | None = None

    async def accept(self, request: Request, idempotency_key: str | None) -> Intake:
        self.staging.mkdir(parents=True)
        try:
            form = await read_form(request, self.staging, self.settings.max_upload_bytes, self.settings.max_field_bytes)
            return self._create(form, idempotency_key)
        except BaseException:
            self._discard()
            raise
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)

    def _unpack(self, form: UploadedForm) -> tuple[Path, bool]:
        assert form.file_path is not None
        model_dir = self.staging / "model"
        if is_bundle(form.file_path):
            extract_bundle(form.file_path, model_dir, self.settings.max_extracted_bytes)
            return find_model(model_dir, form.fields.get("model_path", "").strip() or None), True
        model_dir.mkdir()
        target = model_dir / _safe_filename(form.filename)
        if target.suffix != ".onnx":
            target = target.with_name(target.name + ".onnx")
        try:
            os.link(form.file_path, target)  # the stored original and the job's model share the bytes
        except OSError:
            shutil.copyfile(form.file_path, target)
        return target, False

    def _create(self, form: UploadedForm, idempotency_key: str | None) -> Intake:
        with about_field("check_spec"):
            spec = _parse_spec(form, self.settings.allow_command_checks)
        with about_field("mode"):
            mode, options = _options(form)
        with about_field("golden"):
            golden_format = (
                validate_golden(form.golden.path, self.settings.max_extracted_bytes)
                if form.golden is not None
                else None
            )
        with about_field("model"):
            model_path, bundle = self._unpack(form)
            nodes = validate_model(
                model_path, form.size, self.settings.declared_bytes_floor, self.settings.declared_bytes_factor
            )
        job_id = new_id()
        relative = model_path.relative_to(self.staging / "model")
        self.job_dir = self.services.layout.job_dir(job_id)
        self.job_dir.parent.mkdir(parents=True, exist_ok=True)
        self.job_dir.mkdir()
        shutil.move(str(self.staging / "model"), str(self.services.layout.model_dir(job_id)))
        store = self.services.layout.store
        assert form.file_path is not None
        self.blob = store.adopt(form.file_path, form.sha256, form.size)
        if form.golden is not None:
            self.golden_blob = store.adopt(form.golden.path, form.golden.sha256, form.golden.size)
        job = Job(
            id=job_id,
            team_id=self.team.id,
            status=JobStatus.QUEUED.value,
            queue=queue_for(spec.needs_gpu),
            mode=mode,
            options=options,
            check_spec=form.fields["check_spec"],
            check_kind=spec.kind,
            idempotency_key=idempotency_key,
            model_filename=_safe_filename(form.filename),
            model_sha256=form.sha256,
            model_size=form.size,
            model_path=str(PurePosixPath("jobs", job_id, "model", *relative.parts)),
            nodes_before=nodes,
        )
        try:
            with self.services.db.session() as session:
                JobRepository(session).add(job)
                meta = {"bundle": bundle, "filename": job.model_filename}
                ArtifactRepository(session).put(job_id, ArtifactKind.ORIGINAL, "original", self.blob, meta)
                if form.golden is not None and self.golden_blob is not None and golden_format is not None:
                    golden_meta = {
                        "format": golden_format,
                        "filename": _safe_filename(form.golden.filename, "golden" + suffix_for(golden_format)),
                    }
                    ArtifactRepository(session).put(
                        job_id, ArtifactKind.GOLDEN, "golden", self.golden_blob, golden_meta
                    )
                EventRepository(session).append(job_id, EventKind.QUEUED, {"status": "queued", "nodes_before": nodes})
        except IntegrityError:
            existing = self._existing(idempotency_key)
            if existing is None:
                raise
            self._discard()
            return existing
        return Intake(job_id, job.queue, created=True)

    def _existing(self, key: str | None) -> Intake | None:
        if key is None:
            return None
        with self.services.db.session() as session:
            job = JobRepository(session).by_idempotency_key(self.team.id, key)
            return Intake(job.id, job.queue, created=False) if job else None

    def _discard(self) -> None:
        """Undo what this request stored on disk (the row was never committed)."""
        if self.job_dir is not None:
            shutil.rmtree(self.job_dir, ignore_errors=True)
            self.job_dir = None
        for blob in (self.blob, self.golden_blob):
            if blob is None:
                continue
            with self.services.db.session() as session:
                referenced = ArtifactRepository(session).references(blob.key)
            if not referenced:
                self.services.layout.store.delete(blob.key)
        self.blob = self.golden_blob = None

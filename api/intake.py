"""``POST /v1/jobs`` behind the route: stream the upload to a staging folder, inspect it in an
intake worker process (``api.inspection``: spec, golden values, bundle, model), then store the
original and create the job in one commit (in a thread). Whatever fails on the way leaves no job
row and no folder; a blob it stored is left to the unreferenced-blob sweep (``_discard``: another
upload of the same bytes may have stored it too and not committed yet). The event loop only moves
bytes.

An ``Idempotency-Key`` seen before returns that job when the request is the same (model, golden
values, input samples, check spec and options), and 422 when it differs."""

from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
from fastapi import Request
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.golden import suffix_for
from api.inputs import suffix_for as inputs_suffix
from api.inspection import Inspection, InspectRequest, Refusal, UploadLimits, form_options, safe_filename
from api.labels import parse_labels
from api.problems import ProblemError
from api.release_answers import release_fields
from api.services import Services
from api.settings import ApiSettings
from api.source_jobs import SOURCE_FIELDS, check_source, source_options
from api.uploads import UploadedForm, read_form
from checks.spec import INTERACTIVE_KIND
from persistence import tracing
from persistence.contracts import QUEUE_INTERACTIVE, queue_for
from persistence.enums import ArtifactKind, EventKind, JobStatus, JobTask
from persistence.events import record_event
from persistence.models import Job, Team, new_id, utcnow
from persistence.options import REDUCE_FLAGS, JobOptions
from persistence.repositories import ArtifactRepository, JobRepository
from persistence.repositories.labels import LabelRepository
from persistence.retention import blob_grace_s
from persistence.retry import transaction
from persistence.store import StoredBlob


@dataclass
class Intake:
    job_id: str
    queue: str
    created: bool
    status: str = JobStatus.QUEUED


def upload_limits(settings: ApiSettings) -> UploadLimits:
    return UploadLimits(
        max_extracted_bytes=settings.max_extracted_bytes,
        max_bundle_members=settings.max_bundle_members,
        max_model_nodes=settings.max_model_nodes,
        declared_bytes_floor=settings.declared_bytes_floor,
        declared_bytes_factor=settings.declared_bytes_factor,
        allow_command_checks=settings.allow_command_checks,
        job_time_limit_s=settings.job_time_limit_s,
    )


def _same_request(job: Job, form: UploadedForm, golden_sha256: str | None, inputs_sha256: list[str]) -> bool:
    sent_golden = form.golden.sha256 if form.golden is not None else None
    stored = JobOptions.from_stored(job.mode, job.options)
    try:
        sent = form_options(form.fields, interactive=job.queue == QUEUE_INTERACTIVE)
    except ProblemError:
        return False  # not what the stored job was made of
    task = form.fields.get("task", "").strip() or JobOptions.task.value
    return (
        job.model_sha256 == form.sha256
        and job.check_spec == form.fields.get("check_spec")
        and sent.mode == stored.mode
        and all(getattr(sent, name) == getattr(stored, name) for name in REDUCE_FLAGS if name in job.options)
        and task == stored.task.value
        and _allows_nonfinite(form) == stored.allow_nonfinite
        and _same_source(job, form)
        and _same_releases(stored, form)
        and golden_sha256 == sent_golden
        and inputs_sha256 == [f.sha256 for f in form.inputs]
    )


def _same_source(job: Job, form: UploadedForm) -> bool:
    """The request names the source job (and ``on``) the stored job was made from."""
    try:
        sent = source_options(form.fields, _task_field(form))
    except ProblemError:
        return False
    return all(job.options.get(name) == sent.get(name) for name in SOURCE_FIELDS)


def _same_releases(stored: JobOptions, form: UploadedForm) -> bool:
    """A bisect-releases job's ``releases`` and ``flaky`` are part of the request."""
    if stored.task is not JobTask.BISECT_RELEASES:
        return True
    try:
        sent = release_fields(form.fields)
    except ProblemError:
        return False
    return sent.get("releases") == stored.releases and sent["flaky"] == stored.flaky


def _task_field(form: UploadedForm) -> str:
    return form.fields.get("task", "").strip() or JobTask.REDUCE.value


def _allows_nonfinite(form: UploadedForm) -> bool:
    return form.fields.get("allow_nonfinite", "false").strip().lower() in ("true", "1")


def _key_reused() -> ProblemError:
    return ProblemError(
        422,
        "Idempotency-Key reused",
        "This Idempotency-Key was already used for a different request (another model, golden values, check "
        "spec or options); use a new key for a new job.",
    )


class JobIntake:
    def __init__(self, services: Services, team: Team) -> None:
        self.services, self.team = services, team
        self.settings = services.settings
        self.staging = services.layout.staging_dir() / uuid.uuid4().hex
        self.job_dir: Path | None = None
        self.blob: StoredBlob | None = None
        self.golden_blob: StoredBlob | None = None
        self.input_blobs: list[StoredBlob] = []

    async def accept(self, request: Request, idempotency_key: str | None) -> Intake:
        started_ns = time.time_ns()
        self.staging.mkdir(parents=True)
        try:
            form = await read_form(request, self.staging, self.settings.max_upload_bytes, self.settings.max_field_bytes)
            labels = parse_labels(form.fields.get("labels"))
            if idempotency_key:
                replay = await anyio.to_thread.run_sync(self._replay, form, idempotency_key)
                if replay is not None:
                    return replay
            inspection = await self._inspect(form)
            intake = await anyio.to_thread.run_sync(self._create, form, inspection, idempotency_key, labels)
            if intake.created:
                traced: dict[str, tracing.Attribute] = {"job.model_size": form.size, "job.queue": intake.queue}
                tracing.intake(intake.job_id, labels.get(tracing.TRACEPARENT_LABEL), started_ns, traced)
            return intake
        except BaseException:
            self._discard()
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(shutil.rmtree, self.staging, True)

    async def _inspect(self, form: UploadedForm) -> Inspection:
        assert form.file_path is not None
        request = InspectRequest(
            staging=self.staging,
            upload=form.file_path,
            filename=form.filename,
            size=form.size,
            fields=dict(form.fields),
            golden=form.golden.path if form.golden is not None else None,
            golden_size=form.golden.size if form.golden is not None else 0,
            limits=upload_limits(self.settings),
            inputs=[(f.path, f.filename) for f in form.inputs],
        )
        pool = self.services.intake
        pool.reserve()
        try:
            outcome = await pool.inspect(request)
        finally:
            pool.release()
        if isinstance(outcome, Refusal):
            raise outcome.error()
        return outcome

    def _replay(self, form: UploadedForm, key: str) -> Intake | None:
        """The job this key created before, when the request is the same; 422 when it is not."""
        with self.services.db.session() as session:
            job = JobRepository(session).by_idempotency_key(self.team.id, key)
            if job is None:
                return None
            artifacts = ArtifactRepository(session)
            golden = artifacts.get(job.id, ArtifactKind.GOLDEN, "golden")
            inputs = [a.sha256 for a in artifacts.inputs(job.id)]
            if not _same_request(job, form, golden.sha256 if golden is not None else None, inputs):
                raise _key_reused()
            return Intake(job.id, job.queue, created=False, status=job.status)

    def _create(
        self, form: UploadedForm, inspection: Inspection, idempotency_key: str | None, labels: dict[str, str]
    ) -> Intake:
        source = source_options(form.fields, _task_field(form))
        job_id = new_id()
        self.job_dir = self.services.layout.job_dir(job_id)
        self.job_dir.parent.mkdir(parents=True, exist_ok=True)
        self.job_dir.mkdir()
        shutil.move(str(self.staging / "model"), str(self.services.layout.model_dir(job_id)))
        store = self.services.layout.store
        assert form.file_path is not None
        self.blob = store.adopt(form.file_path, form.sha256, form.size)
        if form.golden is not None:
            self.golden_blob = store.adopt(form.golden.path, form.golden.sha256, form.golden.size)
        for uploaded in form.inputs:
            self.input_blobs.append(store.adopt(uploaded.path, uploaded.sha256, uploaded.size))
        interactive = inspection.spec_kind == INTERACTIVE_KIND
        status = JobStatus.RUNNING if interactive else JobStatus.QUEUED  # interactive: the api runs it
        queue = QUEUE_INTERACTIVE if interactive else queue_for(inspection.needs_gpu)

        def submit(session: Session) -> None:
            """The job's row, its artifact rows and its first event: run again from the start
            when PostgreSQL aborts it as a conflict (``persistence.retry``)."""
            job = self._job_row(job_id, form, inspection, idempotency_key, status, queue)
            check_source(session, self.team.id, source)  # the team's own succeeded reduce job
            job.options = {**job.options, **source}
            JobRepository(session).add(job)
            LabelRepository(session).add(job_id, labels)
            self._artifact_rows(session, job, form, inspection)
            nodes = inspection.nodes
            if interactive:
                record_event(session, job_id, EventKind.STARTED, {"status": status, "nodes_before": nodes})
            else:
                record_event(session, job_id, EventKind.QUEUED, {"status": status, "nodes_before": nodes})

        try:
            transaction(self.services.db, submit, f"the submission of job {job_id}")
        except IntegrityError:
            if idempotency_key is None:
                raise
            self._discard()
            existing = self._replay(form, idempotency_key)  # a concurrent request with the same key won
            if existing is None:
                raise
            return existing
        return Intake(job_id, queue, created=True, status=status)

    def _job_row(
        self,
        job_id: str,
        form: UploadedForm,
        inspection: Inspection,
        idempotency_key: str | None,
        status: JobStatus,
        queue: str,
    ) -> Job:
        interactive = status == JobStatus.RUNNING
        return Job(
            id=job_id,
            team_id=self.team.id,
            status=status,
            queue=queue,
            started_at=utcnow() if interactive else None,
            mode=inspection.options.mode,
            options=inspection.options.to_stored(),
            check_spec=form.fields["check_spec"],
            requires=inspection.requires.to_json(),
            spec=inspection.spec,
            check_kind=inspection.spec_kind,
            idempotency_key=idempotency_key,
            model_filename=safe_filename(form.filename),
            model_sha256=form.sha256,
            model_size=form.size,
            model_path=str(PurePosixPath("jobs", job_id, "model", inspection.model_relative)),
            nodes_before=inspection.nodes,
        )

    def _artifact_rows(self, session: Session, job: Job, form: UploadedForm, inspection: Inspection) -> None:
        """The original, the golden values and the input samples as artifact rows of ``job``."""
        assert self.blob is not None
        artifacts = ArtifactRepository(session)
        meta: dict[str, Any] = {"bundle": inspection.bundle, "filename": job.model_filename}
        artifacts.put(job.id, ArtifactKind.ORIGINAL, "original", self.blob, meta)
        if form.golden is not None and self.golden_blob is not None and inspection.golden_format:
            golden_meta = {
                "format": inspection.golden_format,
                "filename": safe_filename(form.golden.filename, "golden" + suffix_for(inspection.golden_format)),
            }
            artifacts.put(job.id, ArtifactKind.GOLDEN, "golden", self.golden_blob, golden_meta)
        for i, (uploaded, blob, fmt) in enumerate(
            zip(form.inputs, self.input_blobs, inspection.inputs_formats, strict=True)
        ):
            inputs_meta = {
                "format": fmt,
                "filename": safe_filename(uploaded.filename, f"inputs-{i}{inputs_suffix(fmt)}"),
                "samples": inspection.samples,
            }
            artifacts.put(job.id, ArtifactKind.INPUTS, f"inputs-{i}", blob, inputs_meta)

    def _discard(self) -> None:
        """Undo what this request stored on disk (the row was never committed). Its folder goes; a
        blob only when no artifact row refers to it and nothing stored it within the blob grace
        period (``persistence.retention.blob_grace_s``, R1's rule): the store is content-addressed,
        and another upload of the same bytes (any team) may have stored it and not committed its
        row yet. A blob this request just stored is therefore left to the unreferenced-blob sweep."""
        if self.job_dir is not None:
            shutil.rmtree(self.job_dir, ignore_errors=True)
            self.job_dir = None
        keys = [blob.key for blob in (self.blob, self.golden_blob, *self.input_blobs) if blob is not None]
        if keys:
            grace = blob_grace_s(self.settings.job_time_limit_s)
            with self.services.db.session() as session:
                referenced = ArtifactRepository(session).referenced(keys)
            for key in keys:
                if key not in referenced:
                    self.services.layout.store.delete_if_stored_before(key, grace)
        self.blob = self.golden_blob = None
        self.input_blobs = []

"""A job as one worker process keeps it ready for its checks: the prepared model (``Workspace``),
the parsed spec, the runnable check and the session's options. Loading a big model takes long, so
each process keeps the last few jobs it served (``worker.kept_jobs``, least recently used first out)
and any check of those jobs it takes next starts at once.

Each process prepares a job in its own folder (``work/<job>/<process>``): checks of the same job
on other processes of the host never share a file."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tarfile
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
from sqlalchemy.orm import Session

from checks.spec import CheckSpec, ModelCheck
from checks.user_inputs import complete_samples, golden_from_samples, load_user_samples
from engine.precision import PrecisionPlan
from engine.session import ReductionSession, SessionCheck
from engine.workspace import ReduceOptions, Workspace, load_workspace
from jobflow.ending import JobCancelledError
from persistence.enums import ArtifactKind, JobTask
from persistence.models import Job
from persistence.options import JobOptions
from persistence.repositories import ArtifactRepository
from persistence.store import ArtifactStore
from persistence.stored_spec import stored_spec
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.requests import SessionListener
from worker.checking import job_check
from worker.context import RunnerContext
from worker.live_session import LiveSession
from worker.precision_job import precision_plan, start_precision
from worker.preparing import PreparationStopped
from worker.release_envs import job_env

log = logging.getLogger("onnx_reducer.worker")


@dataclass(frozen=True)
class JobInput:
    """What preparing a job reads from its row."""

    job_id: str
    spec: dict[str, Any] | None  # the spec parsed at intake (``jobs.spec``; ``persistence.stored_spec``)
    config: SessionConfig
    model_path: str
    golden: tuple[str, str, str] | None  # (storage key, sha256, format)
    task: JobTask = JobTask.REDUCE
    inputs: tuple[InputFile, ...] = ()  # uploaded input samples, in the order sent
    original: tuple[str, bool] | None = None  # the uploaded model's (storage key, is a bundle)
    allow_nonfinite: bool = False  # a precision job: keep the search's answer, inf in fp16 tensors or not

    @classmethod
    def of(cls, session: Session, job: Job) -> JobInput:
        options = JobOptions.from_stored(job.mode, job.options)
        artifacts = ArtifactRepository(session)
        golden = artifacts.get(job.id, ArtifactKind.GOLDEN, "golden")
        original = artifacts.get(job.id, ArtifactKind.ORIGINAL, "original")
        inputs = tuple(
            InputFile(a.storage_key, a.sha256, str(a.meta.get("format", "npz")), str(a.meta.get("filename", a.name)))
            for a in artifacts.inputs(job.id)
        )
        return cls(
            job_id=job.id,
            spec=job.spec,
            config=options.session_config(),
            model_path=job.model_path,
            golden=(golden.storage_key, golden.sha256, str(golden.meta.get("format", "zip"))) if golden else None,
            task=options.task,
            inputs=inputs,
            original=(original.storage_key, bool(original.meta.get("bundle"))) if original else None,
            allow_nonfinite=options.allow_nonfinite,
        )


@dataclass(frozen=True)
class InputFile:
    """An uploaded inputs file: where it is stored, its digest, format (npz | json) and name."""

    key: str
    sha256: str
    format: str
    filename: str


class _Log:
    def info(self, message: str) -> None:
        log.info(message)

    def warning(self, message: str) -> None:
        log.warning(message)


@dataclass
class PreparedJob:
    job_id: str
    spec: CheckSpec
    config: SessionConfig
    workspace: Workspace
    check: ModelCheck
    session_check: SessionCheck
    work_dir: Path
    task: JobTask = JobTask.REDUCE
    plan: PrecisionPlan | None = None  # a precision job's reference run
    allow_nonfinite: bool = False  # a precision job's option (``worker.precision_job``)
    _writer: ReductionSession | None = field(default=None, repr=False)
    live: LiveSession | None = field(default=None, repr=False)  # kept between verdicts (worker.live_session)

    def session(self, state: dict[str, Any] | None, listener: SessionListener | None = None) -> ReductionSession:
        """The job's session at the position ``state`` was saved in (replayed; no check runs); a
        precision job's is a ``PrecisionSession`` (``worker/precision_job.py``)."""
        if self.task is JobTask.PRECISION:
            assert self.plan is not None
            return start_precision(self.workspace, self.plan, self.config.mode, state, listener)
        return ReductionSession.start(self.workspace, self.session_check, self.config, state, listener)

    def write(self, candidate: Candidate, path: Path) -> list[str]:
        """Write ``candidate``'s model as the job's session does (a precision job: the real
        mixed-precision model); the weight files it uses."""
        if self.task is JobTask.PRECISION:
            if self._writer is None:
                self._writer = self.session(None)
            return self._writer.write(candidate, path)
        self.workspace.write(candidate, path)
        return self.workspace.weight_locations(candidate)

    def close(self) -> None:
        self.live = None
        self.workspace.close()
        shutil.rmtree(self.work_dir, ignore_errors=True)


def prepare(job: JobInput, ctx: RunnerContext) -> PreparedJob:
    """Read the stored spec, load the model and build the check (raises the errors a bad job has)."""
    spec = stored_spec(job.spec)
    work_dir = _process_dir(ctx, job.job_id)
    shutil.rmtree(work_dir, ignore_errors=True)
    model = ctx.layout.root / job.model_path
    if not model.is_file() and job.original is not None:
        if not _job_exists(ctx, job.job_id):
            raise PreparationStopped()  # deleted: its folder is not made again
        unpack_original(ctx.layout.store, ctx.layout.model_dir(job.job_id), *job.original, model.name)
    options = ReduceOptions(model=model, work_dir=work_dir, artifact_stem="iter", link_weights=True)
    workspace = load_workspace(options, _Log())
    try:
        golden, sha256 = _place_golden(ctx.layout.store, work_dir, *job.golden) if job.golden else (None, None)
        if job.inputs:
            golden, sha256 = _golden_from_inputs(ctx.layout.store, work_dir, options.model, spec, job.inputs)
        check = job_check(spec, work_dir, ctx.allow_command, ctx.check_memory_limit_bytes, golden, job_env(ctx, spec))
        session_check = SessionCheck(check, spec, golden, sha256)
        plan = None
        if job.task is JobTask.PRECISION:  # judged against the fp32 original (engine/precision.py)

            def build(judged: CheckSpec, values: Path | None) -> ModelCheck:
                return job_check(
                    judged, work_dir, ctx.allow_command, ctx.check_memory_limit_bytes, values, job_env(ctx, spec)
                )

            plan = precision_plan(workspace, session_check, build, work_dir)
            check, session_check = plan.check.check, plan.check
    except BaseException:
        workspace.close()
        raise
    return PreparedJob(
        job.job_id,
        spec,
        job.config,
        workspace,
        check,
        session_check,
        work_dir,
        job.task,
        plan,
        allow_nonfinite=job.allow_nonfinite,
    )


def _process_dir(ctx: RunnerContext, job_id: str) -> Path:
    """This thread's folder for ``job_id`` (checks of one job on other processes never share a file)."""
    return ctx.layout.work_dir(job_id) / f"process-{os.getpid()}-{threading.get_ident()}"


def _job_exists(ctx: RunnerContext, job_id: str) -> bool:
    with ctx.db.session() as session:
        return session.get(Job, job_id) is not None


def _remove_stopped(ctx: RunnerContext, job_id: str) -> None:
    """What a stopped preparation wrote goes: this thread's folder, and the job's whole folder
    when its row is gone (a deleted job's folder, made again by the preparation, is not left)."""
    shutil.rmtree(_process_dir(ctx, job_id), ignore_errors=True)
    if not _job_exists(ctx, job_id):
        shutil.rmtree(ctx.layout.job_dir(job_id), ignore_errors=True)


def unpack_original(store: ArtifactStore, model_dir: Path, key: str, bundle: bool, model_name: str) -> None:
    """Rebuild the job's model folder from its stored upload, on a machine whose data folder never
    saw it (an object store shared by the farm, each machine with its own data folder): the model
    file under the name the api gave it, or the bundle unpacked as the api unpacked it (the api
    checked these very bytes: the key is their sha256). Built beside and renamed into place, so
    processes of one machine racing here agree."""
    source = store.path(key)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="model-", dir=model_dir.parent))
    try:
        built = staging / "model"
        built.mkdir()
        if not bundle:
            try:
                os.link(source, built / model_name)
            except OSError:
                shutil.copyfile(source, built / model_name)
        elif zipfile.is_zipfile(source):
            with zipfile.ZipFile(source) as archive:
                archive.extractall(built)
        else:
            with tarfile.open(source, "r:*") as archive:
                archive.extractall(built, filter="data")
        try:
            os.rename(built, model_dir)
        except OSError:
            if not model_dir.is_dir():  # not another process of this machine having won the race
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _place_golden(store: ArtifactStore, work_dir: Path, key: str, sha256: str, fmt: str) -> tuple[Path, str]:
    """The job's golden values beside the checks, named so that the check reads them in their
    format (``.json``: Polygraphy JSON; otherwise the golden zip): a hardlink, or a copy."""
    target = work_dir / ("golden.json" if fmt == "json" else "golden.golden")
    _place(store, key, target)
    return target, sha256


def _golden_from_inputs(
    store: ArtifactStore, work_dir: Path, model: Path, spec: CheckSpec, inputs: tuple[InputFile, ...]
) -> tuple[Path, str]:
    """Golden values made from the job's uploaded samples (every sample, in order: the check judges
    each one), and the digest naming them in the verdict identity (that of the uploads)."""
    paths: list[Path] = []
    for i, item in enumerate(inputs):
        target = work_dir / f"inputs-{i}{'.json' if item.format == 'json' else '.npz'}"
        _place(store, item.key, target)
        paths.append(target)
    onnx_model = onnx.load(str(model), load_external_data=False)
    loaded = load_user_samples(paths, onnx_model, names=[item.filename for item in inputs])
    low, high = spec.input_range
    samples = complete_samples(onnx_model, loaded, spec.seed, low, high)
    golden = golden_from_samples(model, work_dir / "inputs.golden", samples)
    digest = hashlib.sha256("".join(item.sha256 for item in inputs).encode()).hexdigest()
    return golden, f"inputs:{digest}"


def _place(store: ArtifactStore, key: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    try:
        os.link(store.path(key), target)
    except OSError:
        shutil.copyfile(store.path(key), target)


def prepared_job(job: JobInput, ctx: RunnerContext) -> PreparedJob:
    """``job`` as this thread of ``ctx`` keeps it prepared (``RunnerContext.prepared``), prepared
    now if it is not kept (or its folder went)."""
    kept = ctx.prepared.find(job.job_id)
    if isinstance(kept, PreparedJob):
        return kept
    began = time.monotonic()
    try:
        with ctx.preparing.of(job.job_id):
            prepared = prepare(job, ctx)
    except PreparationStopped:
        log.info(
            "job %s: preparation stopped after %.1f s: the job was cancelled, ended or deleted",
            job.job_id,
            time.monotonic() - began,
        )
        _remove_stopped(ctx, job.job_id)
        raise JobCancelledError() from None  # the job has ended: nothing to end (worker.stops)
    ctx.prepared.add(job.job_id, prepared)
    return prepared

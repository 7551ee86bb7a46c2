"""``GET /v1/jobs/{id}/artifacts/{name}``: min-bad, min-good, original, golden (the golden values
uploaded with the job), mixed (a precision job's mixed-precision model) or iteration-N, as an
attachment. Iteration models reference the job's
weights; when they have any, the download is a tar of the model and those weight files (assembled
on the fly, nothing copied in the store). With an S3 store and ``S3_PRESIGNED_DOWNLOADS`` a single
stored file answers 307 to a short-lived presigned URL instead (``blob_download``).

A job that ended early (cancelled, or failed after some checks) has no min-bad of its own: its
``min-bad`` is then the smallest iteration model that reproduced the original failure (the best
model so far), named ``JOB-min-bad-iteration-N``."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse, Response
from starlette.background import BackgroundTask

from api.deps import ServicesDep, TeamDep
from api.problems import not_found
from api.routes.jobs import load_job
from api.services import Services
from persistence.bundles import write_bundle
from persistence.enums import ArtifactKind, JobStatus
from persistence.models import Artifact, Job
from persistence.repositories import ArtifactRepository, IterationRepository
from persistence.store import ArtifactStore

router = APIRouter(prefix="/v1/jobs", tags=["artifacts"])
_ITERATION = re.compile(r"^iteration-(\d{1,9})$")
_INPUTS = re.compile(r"^inputs-(\d{1,2})$")  # the uploaded input samples files, in the order sent
_KINDS = {
    "min-bad": ArtifactKind.MIN_BAD,
    "min-good": ArtifactKind.MIN_GOOD,
    "original": ArtifactKind.ORIGINAL,
    "golden": ArtifactKind.GOLDEN,
    "mixed": ArtifactKind.MIXED,
}
_ENDED_EARLY = (JobStatus.CANCELLED, JobStatus.FAILED)


@dataclass(frozen=True)
class LocatedArtifact:
    """The stored artifact behind a public name, with the weight files an iteration model needs."""

    artifact: Artifact
    weights: dict[str, Artifact]
    best_so_far: int | None = None  # the iteration standing in for the min-bad of a job that ended early


def _lookup(repo: ArtifactRepository, job_id: str, name: str) -> Artifact | None:
    if name in _KINDS:
        return repo.get(job_id, _KINDS[name], "original" if name == "original" else name)
    if (inputs := _INPUTS.match(name)) is not None:
        return repo.get(job_id, ArtifactKind.INPUTS, f"inputs-{int(inputs.group(1))}")
    match = _ITERATION.match(name)
    return repo.get(job_id, ArtifactKind.ITERATION, f"iteration-{int(match.group(1))}") if match else None


def locate_artifact(services: Services, job: Job, name: str) -> LocatedArtifact:
    """The artifact called ``name`` of ``job`` (already checked to belong to the caller's team), or 404."""
    best_so_far = None
    with services.db.session() as session:
        repo = ArtifactRepository(session)
        artifact = _lookup(repo, job.id, name)
        if artifact is None and name == "min-bad" and job.status in _ENDED_EARLY:
            best = IterationRepository(session).best_failing(job.id)
            if best is not None:
                best_so_far = best.number
                artifact = repo.get(job.id, ArtifactKind.ITERATION, f"iteration-{best.number}")
        weights = {a.name: a for a in repo.of_kind(job.id, ArtifactKind.WEIGHTS)}
    if artifact is None:
        raise not_found(f"Artifact '{name}' of job '{job.id}'")
    return LocatedArtifact(artifact, weights, best_so_far)


@router.get(
    "/{job_id}/artifacts/{name}",
    response_class=FileResponse,
    responses={
        200: {"content": {"application/octet-stream": {}}},
        307: {"description": "S3_PRESIGNED_DOWNLOADS: a short-lived presigned URL of the object store"},
    },
)
def download_artifact(job_id: str, name: str, services: ServicesDep, team: TeamDep) -> Response:
    job = load_job(services, team.id, job_id)
    located = locate_artifact(services, job, name)
    artifact, weights = located.artifact, located.weights
    store = services.layout.store
    if artifact.kind == ArtifactKind.ORIGINAL.value:
        return blob_download(store, artifact.storage_key, job.model_filename)
    if artifact.kind in (ArtifactKind.GOLDEN.value, ArtifactKind.INPUTS.value):
        fallback = f"{job_id}-{artifact.name}"
        return blob_download(store, artifact.storage_key, str(artifact.meta.get("filename") or fallback))
    label = name if located.best_so_far is None else f"min-bad-iteration-{located.best_so_far}"
    if artifact.kind == ArtifactKind.ITERATION.value and artifact.meta.get("weights"):
        members = [(f"{label}.onnx", store.path(artifact.storage_key))]
        members += [(loc, store.path(weights[loc].storage_key)) for loc in artifact.meta["weights"]]
        bundle = write_bundle(store.tmp_dir / f"{uuid.uuid4().hex}.tar", members)
        return _attachment(bundle, f"{job_id}-{label}.tar", BackgroundTask(bundle.unlink, missing_ok=True))
    suffix = ".tar" if artifact.meta.get("bundle") else ".onnx"
    return blob_download(store, artifact.storage_key, f"{job_id}-{label}{suffix}")


def blob_download(store: ArtifactStore, key: str, filename: str, media: str | None = None) -> Response:
    """One stored blob as an attachment: a redirect to a short-lived presigned URL when the store
    gives one (S3 with ``S3_PRESIGNED_DOWNLOADS``), else the file streamed by the api (from the
    local store, or from this machine's cache of the bucket)."""
    url = store.download_url(key, filename)
    if url is not None:
        return RedirectResponse(url, status_code=307)
    if media is not None:
        return FileResponse(store.path(key), filename=filename, media_type=media)
    return _attachment(store.path(key), filename)


def _attachment(path: object, filename: str, background: BackgroundTask | None = None) -> FileResponse:
    media = "application/x-tar" if filename.endswith(".tar") else "application/octet-stream"
    return FileResponse(path, filename=filename, media_type=media, background=background)  # type: ignore[arg-type]

"""``GET /v1/jobs/{id}/artifacts/{name}``: min-bad, min-good, original, golden (the golden values
uploaded with the job) or iteration-N, as an attachment. Iteration models reference the job's
weights; when they have any, the download is a tar of the model and those weight files (assembled
on the fly, nothing copied in the store)."""

from __future__ import annotations

import re
import uuid

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from api.deps import ServicesDep, TeamDep
from api.problems import not_found
from api.routes.jobs import load_job
from persistence.bundles import write_bundle
from persistence.enums import ArtifactKind
from persistence.models import Artifact
from persistence.repositories import ArtifactRepository

router = APIRouter(prefix="/v1/jobs", tags=["artifacts"])
_ITERATION = re.compile(r"^iteration-(\d{1,9})$")
_KINDS = {
    "min-bad": ArtifactKind.MIN_BAD,
    "min-good": ArtifactKind.MIN_GOOD,
    "original": ArtifactKind.ORIGINAL,
    "golden": ArtifactKind.GOLDEN,
}


def _lookup(repo: ArtifactRepository, job_id: str, name: str) -> Artifact | None:
    if name in _KINDS:
        return repo.get(job_id, _KINDS[name], "original" if name == "original" else name)
    match = _ITERATION.match(name)
    return repo.get(job_id, ArtifactKind.ITERATION, f"iteration-{int(match.group(1))}") if match else None


@router.get(
    "/{job_id}/artifacts/{name}",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}},
)
def download_artifact(job_id: str, name: str, services: ServicesDep, team: TeamDep) -> FileResponse:
    job = load_job(services, team.id, job_id)
    with services.db.session() as session:
        repo = ArtifactRepository(session)
        artifact = _lookup(repo, job_id, name)
        weights = {a.name: a for a in repo.of_kind(job_id, ArtifactKind.WEIGHTS)}
    if artifact is None:
        raise not_found(f"Artifact '{name}' of job '{job_id}'")
    store = services.layout.store
    if artifact.kind == ArtifactKind.ORIGINAL.value:
        return _attachment(store.path(artifact.storage_key), job.model_filename)
    if artifact.kind == ArtifactKind.GOLDEN.value:
        return _attachment(store.path(artifact.storage_key), str(artifact.meta.get("filename") or f"{job_id}-golden"))
    if artifact.kind == ArtifactKind.ITERATION.value and artifact.meta.get("weights"):
        members = [(f"{name}.onnx", store.path(artifact.storage_key))]
        members += [(loc, store.path(weights[loc].storage_key)) for loc in artifact.meta["weights"]]
        bundle = write_bundle(store.tmp_dir / f"{uuid.uuid4().hex}.tar", members)
        return _attachment(bundle, f"{job_id}-{name}.tar", BackgroundTask(bundle.unlink, missing_ok=True))
    suffix = ".tar" if artifact.meta.get("bundle") else ".onnx"
    return _attachment(store.path(artifact.storage_key), f"{job_id}-{name}{suffix}")


def _attachment(path: object, filename: str, background: BackgroundTask | None = None) -> FileResponse:
    media = "application/x-tar" if filename.endswith(".tar") else "application/octet-stream"
    return FileResponse(path, filename=filename, media_type=media, background=background)  # type: ignore[arg-type]

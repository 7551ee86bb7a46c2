"""``GET /v1/jobs/{id}/bundle``: a finished reduce job's bug-report bundle (a zip: min-bad and
min-good with the weights they read, the inputs min-bad sees, the check, the worker's environment,
``repro.py`` and a README; ``engine.bundle``). The worker that finished the job built and stored
it (``engine.report_bundle``); this route serves the stored file, team-scoped like every
artifact. A job whose bundle was not kept (its self-check did not reproduce the pinned failure in a
clean environment) has the reason in its end event (``bundle_refused``): the 404 repeats it. A
bisect-passes or bisect-releases job started from a reduce job (``source_job_id``) has that job's
bundle with its answer in it (``worker.source_job``)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response

from api.deps import ServicesDep, TeamDep
from api.problems import ProblemError
from api.routes.artifacts import blob_download
from api.routes.jobs import load_job
from persistence.enums import ArtifactKind, JobStatus, JobTask
from persistence.repositories import ArtifactRepository, EventRepository

router = APIRouter(prefix="/v1/jobs", tags=["artifacts"])


@router.get(
    "/{job_id}/bundle",
    response_class=FileResponse,
    responses={
        200: {"content": {"application/zip": {}}},
        307: {"description": "S3_PRESIGNED_DOWNLOADS: a short-lived presigned URL of the object store"},
    },
)
def download_bundle(job_id: str, services: ServicesDep, team: TeamDep) -> Response:
    job = load_job(services, team.id, job_id)
    with services.db.session() as session:
        artifact = ArtifactRepository(session).get(job.id, ArtifactKind.BUNDLE, ArtifactKind.BUNDLE.value)
        last = EventRepository(session).after(job.id, job.event_seq - 1, 1) if artifact is None else []
    if artifact is None:
        refused = next((str(e.payload["bundle_refused"]) for e in last if e.payload.get("bundle_refused")), None)
        why = _why_none(job.status, JobTask.of(job.options), job_id)
        if refused is not None and job.status == JobStatus.SUCCEEDED:
            why = f"Job '{job_id}' has no bundle: {refused}. Download artifacts/min-bad and artifacts/min-good instead."
        raise ProblemError(404, "No bug-report bundle", why)
    return blob_download(services.layout.store, artifact.storage_key, f"{job_id}-bundle.zip", "application/zip")


def _why_none(status: str, task: JobTask, job_id: str) -> str:
    if task is JobTask.PRECISION:
        return f"Job '{job_id}' is a precision job; download its mixed-precision model (artifacts/mixed) instead."
    if task in (JobTask.BISECT_PASSES, JobTask.BISECT_RELEASES):
        return (
            f"Job '{job_id}' is a {task} job: it has a bundle when it succeeded and was started from a reduce job "
            "(source_job_id), whose bundle it copies with its answer in it."
        )
    if status != JobStatus.SUCCEEDED:
        return f"Job '{job_id}' is {status}; a bundle is built when a reduction succeeds. Download artifacts/min-bad."
    return (
        f"Job '{job_id}' has no bundle: it finished before bundles existed, its check is interactive, or the "
        "worker could not build one (see its log). Download artifacts/min-bad and artifacts/min-good instead."
    )

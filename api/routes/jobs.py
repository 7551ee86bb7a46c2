"""Jobs: submit (202 + Location), list, show, iterations, cancel, retry, an interactive job's verdict."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import ObjectDeletedError

from api import deletion
from api.cursor import decode_cursor, encode_cursor
from api.deps import ActorDep, ServicesDep, TeamDep
from api.farm import WorkerView, load_workers, waiting_reason
from api.intake import JobIntake
from api.intake_pool import busy
from api.interactive import answer, fail_to_start, iteration_link, start_interactive
from api.labels import parse_filters
from api.passes_answers import passes_view
from api.problems import ProblemError, not_found
from api.queue_info import with_dispatch
from api.release_answers import release_view
from api.schemas import (
    MAX_SEQ,
    AwaitingVerdict,
    IterationList,
    JobCreated,
    JobList,
    JobOut,
    VerdictIn,
    iteration_from_row,
    job_from_row,
    utc,
)
from api.services import Services
from api.uploads import UploadAbortedError
from checks.user_inputs import INPUT_KINDS
from jobflow.ending import cancel
from persistence.contracts import QUEUE_INTERACTIVE
from persistence.enums import EventKind, JobStatus, JobTask
from persistence.events import record_event
from persistence.models import Job
from persistence.options import JobOptions
from persistence.repositories import (
    RETRYABLE_ERRORS,
    ArtifactRepository,
    IterationRepository,
    JobRepository,
)
from persistence.repositories.labels import LabelRepository
from persistence.retry import transaction
from reducer_core.samples import parse_samples_note
from reducer_core.strategies import MODES

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
log = logging.getLogger("onnx_reducer.api")
_DEFAULTS = JobOptions.for_new_job()  # each option's default, stated once (persistence.options)

_UPLOAD_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["model", "check_spec"],
                    "properties": {
                        "model": {"type": "string", "format": "binary", "description": ".onnx, or .tar/.zip bundle"},
                        "check_spec": {
                            "type": "string",
                            "description": "check spec as YAML or JSON text; `kind: interactive`: a person gives "
                            "every verdict (see awaiting_verdict and POST /v1/jobs/{id}/verdict)",
                        },
                        "golden": {
                            "type": "string",
                            "format": "binary",
                            "description": "golden values (`onnx-reducer golden` zip, or Polygraphy JSON): "
                            "boundary inputs of every candidate; required by kind 'golden'",
                        },
                        "inputs": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "input samples (repeatable part: .npz, one sample each, or "
                            "Polygraphy JSON, one per feed dict; several files are several samples, in order): "
                            "a compare/golden/error check judges every one; not with 'golden'",
                        },
                        "mode": {"type": "string", "enum": list(MODES), "default": _DEFAULTS.mode},
                        "task": {
                            "type": "string",
                            "enum": list(JobTask),
                            "default": _DEFAULTS.task.value,
                            "description": "reduce (default): the smallest failing subgraph; precision: the "
                            "fewest nodes that must stay fp32 for the fp16 model to pass the check spec (its "
                            "target runs onnxruntime in fp16); the answer is the job's keep_fp32 and its "
                            "'mixed' artifact; bisect-releases: the first onnxruntime release that fails and the "
                            "last that passes, each release run by a worker advertising it (the job's releases); "
                            "bisect-passes: the onnxruntime optimizers (TensorRT build options) the failure needs",
                        },
                        "releases": {
                            "type": "string",
                            "description": "bisect-releases: comma-separated onnxruntime versions, at least two "
                            "(left out: every release the farm's workers advertise)",
                        },
                        "flaky": {
                            "type": "boolean",
                            "default": _DEFAULTS.flaky,
                            "description": "bisect-releases: the check fails only some of the time; a pass "
                            "counts after repeated passing runs",
                        },
                        "source_job_id": {
                            "type": "string",
                            "description": "bisect-passes, bisect-releases: a succeeded reduce job of the team to "
                            "start from: bisect-passes runs on its min-bad (see on), and the answer goes into a "
                            "copy of its bug-report bundle (GET /v1/jobs/{id}/bundle); another team's job: 404",
                        },
                        "on": {
                            "type": "string",
                            "enum": ["min-bad", "original"],
                            "description": "bisect-passes with source_job_id: the model bisected (default "
                            "min-bad; original: the uploaded model)",
                        },
                        "model_path": {"type": "string", "description": "the model inside a bundle"},
                        "reduce_inputs": {"type": "boolean", "default": _DEFAULTS.reduce_inputs},
                        "reduce_outputs": {"type": "boolean", "default": _DEFAULTS.reduce_outputs},
                        "pin_signature": {"type": "boolean", "default": _DEFAULTS.pin_signature},
                        "confirm_flaky": {
                            "type": "boolean",
                            "default": _DEFAULTS.confirm_flaky,
                            "description": "re-check what makes an answer of 2 to 3 nodes look minimal, up "
                            "to 3 checks, so a flaky single culprit is found (the CLI's default; false: "
                            "--no-confirm-flaky; reduce jobs only; left out of a kind: interactive job: false)",
                        },
                        "reduce_data": {
                            "type": "boolean",
                            "default": _DEFAULTS.reduce_data,
                            "description": "once the graph is minimal, shrink the min-bad model's input sizes "
                            "and weights (the CLI's --reduce-data; reduce jobs only)",
                        },
                        "allow_nonfinite": {
                            "type": "boolean",
                            "default": _DEFAULTS.allow_nonfinite,
                            "description": "precision: keep the search's answer even where an fp16 tensor "
                            "holds inf (the CLI's precision --allow-nonfinite)",
                        },
                        "labels": {
                            "type": "string",
                            "description": 'a JSON object of labels stored with the job, e.g. {"repo": "org/app", '
                            '"commit": "..."} (at most 32; keys: letters, digits, ".", "_", "-", up to 63 '
                            "characters; values up to 1024 characters); GET /v1/jobs?label=key=value filters",
                        },
                    },
                }
            }
        },
    }
}


@router.post("", status_code=202, response_model=JobCreated, openapi_extra=_UPLOAD_DOC)
async def submit_job(
    request: Request,
    services: ServicesDep,
    team: TeamDep,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> JSONResponse:
    """Upload a model and a check spec; the job is committed, then queued."""
    if services.intake.pending >= services.intake.max_pending:
        raise busy(services.settings.retry_after_s)  # saturated: refuse before reading the upload
    try:
        intake = await JobIntake(services, team).accept(request, idempotency_key)
    except UploadAbortedError:
        log.info("client disconnected during an upload; nothing was stored")
        return JSONResponse({"status": 400}, status_code=400)  # nobody is left to read it
    if intake.created and intake.queue == QUEUE_INTERACTIVE:
        await _start_interactive(services, intake.job_id)
    elif intake.created:
        try:
            services.enqueue(intake.job_id, intake.queue)
        except Exception:
            log.exception("enqueue of %s failed; worker recovery will pick it up", intake.job_id)
    return _accepted(intake.job_id, intake.status, replayed=not intake.created)


async def _start_interactive(services: Services, job_id: str) -> None:
    """An interactive job's first check, prepared here (no worker runs it); a model that cannot be
    prepared ends the job failed, saying why."""
    try:
        seqs = await anyio.to_thread.run_sync(start_interactive, services, job_id)
    except Exception as exc:
        log.exception("interactive job %s could not start", job_id)
        seqs = await anyio.to_thread.run_sync(fail_to_start, services, job_id, exc)
    for seq in seqs:
        services.notify(job_id, seq)


def _accepted(job_id: str, status: str, replayed: bool) -> JSONResponse:
    location = f"/v1/jobs/{job_id}"
    headers = {"Location": location}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    body = JobCreated(id=job_id, status=status, location=location).model_dump()
    return JSONResponse(body, status_code=202, headers=headers)


@router.get("", response_model=JobList)
def list_jobs(
    services: ServicesDep,
    team: TeamDep,
    status: JobStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: str | None = None,
    label: Annotated[
        list[str] | None,
        Query(description="key=value: only jobs carrying this label (repeat it: every one must match)."),
    ] = None,
) -> JobList:
    after = decode_cursor(cursor) if cursor else None
    wanted = parse_filters(label or [])
    with services.db.session() as session:
        page = JobRepository(session).page(team.id, status, limit, after, wanted)
        workers = _workers_for(session, services, page.jobs)
        answers = _precision_answers(session, page.jobs)
        labels = LabelRepository(session).for_jobs([job.id for job in page.jobs])
        items = [_job_out(session, job, workers, answers, labels=labels) for job in page.jobs]
    return JobList(items=items, next_cursor=encode_cursor(page.next_key) if page.next_key else None)


def load_job(services: Services, team_id: str, job_id: str) -> Job:
    with services.db.session() as session:
        job = JobRepository(session).for_team(team_id, job_id)
    if job is None:
        raise not_found(f"Job '{job_id}'")
    return job


def _job_out(
    session: Session,
    job: Job,
    workers: Sequence[WorkerView] | None = None,
    answers: Mapping[str, list[str]] | None = None,
    flaky: dict[str, Any] | None = None,
    labels: Mapping[str, dict[str, str]] | None = None,
) -> JobOut:
    """``workers``: the farm, to say why a queued job waits (``_workers_for``). The mean check time
    comes from the job's own counters (every finished iteration adds its duration to
    ``check_time_s`` and is numbered ``iterations_done``; ``cache_hits`` of them ran no check): no
    query per job. ``answers``: the page's precision answers (``_precision_answers``), looked up
    for this job alone when absent; a running interactive job's awaited check is one query."""
    reason = waiting_reason(job, workers) if workers is not None else None
    checked = job.iterations_done - job.cache_hits
    mean = job.check_time_s / checked if checked > 0 else None
    if answers is None:
        answers = _precision_answers(session, [job])
    if labels is None:
        labels = LabelRepository(session).for_jobs([job.id])
    return job_from_row(
        job,
        mean,
        reason,
        keep_fp32=answers.get(job.id),
        flaky=flaky,
        awaiting=_awaiting(session, job),
        labels=labels.get(job.id),
    )


def _samples(session: Session, job: Job) -> dict[str, Any] | None:
    """How many samples the check judged and which fail, for the original model and the best one so
    far (their verdicts' ``samples failing: [...] of N judged``); None when the check judges one
    set of generated inputs without saying so (command, op-present, interactive)."""
    iterations = IterationRepository(session)
    first = iterations.original(job.id)
    original = parse_samples_note(first.detail or "") if first is not None else None
    if original is None:
        return None
    best = iterations.best_failing(job.id)
    answer = parse_samples_note(best.detail or "") if best is not None else None
    return {"original": original.to_json(), "min_bad": answer.to_json() if answer is not None else None}


def _precision_answers(session: Session, jobs: Sequence[Job]) -> dict[str, list[str]]:
    """keep_fp32 of the succeeded precision jobs among ``jobs`` (one query, none without such jobs)."""
    done = [
        job.id for job in jobs if job.status == JobStatus.SUCCEEDED and JobTask.of(job.options) is JobTask.PRECISION
    ]
    return ArtifactRepository(session).keep_fp32(done) if done else {}


def _awaiting(session: Session, job: Job) -> AwaitingVerdict | None:
    if job.queue != QUEUE_INTERACTIVE or job.status != JobStatus.RUNNING:
        return None
    row = IterationRepository(session).pending_of(job.id)
    if row is None:
        return None
    link = iteration_link(job.id, row.number)
    return AwaitingVerdict(
        iteration=row.number, phase=row.phase, nodes=row.node_count, artifact=link, asked_at=utc(row.created_at)
    )


def _workers_for(session: Session, services: Services, jobs: Sequence[Job]) -> Sequence[WorkerView] | None:
    """The farm's workers when one of ``jobs`` is queued (only then is there a wait to explain)."""
    if any(job.status == JobStatus.QUEUED for job in jobs):
        return load_workers(session, services.settings)
    return None


def _job_json(services: Services, team_id: str, job_id: str) -> bytes:
    try:
        return _job_json_of(services, team_id, job_id)
    except ObjectDeletedError:  # deleted while its answer was built (a column read after the delete)
        raise not_found(f"Job '{job_id}'") from None


def _job_json_of(services: Services, team_id: str, job_id: str) -> bytes:
    with services.db.session() as session:
        job = JobRepository(session).for_team(team_id, job_id)
        if job is None:
            raise not_found(f"Job '{job_id}'")
        flaky = JobRepository(session).flakiness(job_id) if job.checks_run else None
        out = _job_out(session, job, _workers_for(session, services, [job]), flaky=flaky)
        if job.status.terminal:
            out.verified, out.suspect = ArtifactRepository(session).verification(job_id)
        judges_samples = job.check_kind in INPUT_KINDS and (job.checks_run or job.iterations_done)
        out.samples = _samples(session, job) if judges_samples else None  # two queries, for these kinds only
        if JobTask.of(job.options) is JobTask.BISECT_RELEASES:
            out.releases = release_view(job)
        if JobTask.of(job.options) is JobTask.BISECT_PASSES:
            out.passes = passes_view(job)
        return with_dispatch(session, job, out, services.settings).model_dump_json().encode()


@router.get("/{job_id}", response_model=JobOut)
async def get_job(job_id: str, services: ServicesDep, team: TeamDep) -> Response:
    """The hot path of pollers: a body at most ``JOB_READ_CACHE_S`` old (``api.job_cache``), else
    one thread hop for the database and the body serialised once."""
    body = await services.job_reads.body(
        team.id, job_id, lambda: anyio.to_thread.run_sync(_job_json, services, team.id, job_id)
    )
    return Response(body, media_type="application/json")


@router.get("/{job_id}/iterations", response_model=IterationList)
def list_iterations(
    job_id: str,
    services: ServicesDep,
    team: TeamDep,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> IterationList:
    load_job(services, team.id, job_id)
    with services.db.session() as session:
        rows = IterationRepository(session).list(job_id, after, limit)
        items = [iteration_from_row(r) for r in rows]
    return IterationList(items=items, next_after=items[-1].number if len(items) == limit else None)


@router.post("/{job_id}/cancel", status_code=202, response_model=JobOut)
def cancel_job(job_id: str, services: ServicesDep, team: TeamDep, response: Response) -> JobOut:
    """Queued jobs are cancelled at once; a running job stops within seconds (its check is killed)."""

    def work(session: Session) -> tuple[int | None, JobOut]:
        job = JobRepository(session).for_team(team.id, job_id)
        if job is None:
            raise not_found(f"Job '{job_id}'")
        seq = cancel(session, job, at_once=job.queue == QUEUE_INTERACTIVE)  # the job's row first
        session.refresh(job)
        if job.status.terminal and job.status is not JobStatus.CANCELLED:
            raise ProblemError(409, "Job already finished", f"Job '{job_id}' has already {job.status}.")
        return seq, _job_out(session, job)

    seq, out = transaction(services.db, work, f"the cancel of job {job_id}")
    services.job_reads.forget(team.id, job_id)
    if seq is not None:
        services.notify(job_id, seq)
    if out.status == JobStatus.CANCELLED:
        response.status_code = 200
    return out


@router.delete("/{job_id}", status_code=204, response_class=Response)
async def delete_job(job_id: str, services: ServicesDep, team: TeamDep, actor: ActorDep) -> Response:
    """Cancel the job (if it still runs), then delete it: its rows, its folder and the stored blobs
    no other job refers to. 204; 404 for another team's job; 409 while a cancelled job has not
    stopped within seconds (send it again)."""
    await deletion.delete_job(services, team.id, job_id, actor)
    return Response(status_code=204)


# "Job 'X' <phrase>": each status in words (not "is succeeded").
_STATUS_PHRASES = {
    JobStatus.QUEUED: "is queued",
    JobStatus.RUNNING: "is still running",
    JobStatus.FINISHING: "is still finishing (its answer is being stored and verified)",
    JobStatus.SUCCEEDED: "has succeeded",
    JobStatus.FAILED: "has failed",
    JobStatus.CANCELLED: "was cancelled",
}


@router.post("/{job_id}/retry", status_code=202, response_model=JobOut)
def retry_job(job_id: str, services: ServicesDep, team: TeamDep) -> JobOut:
    """Queue a failed job again after its cause was fixed (a broken check tool, a lost GPU, a worker
    that kept dying, the time limit): it resumes from its last finished check, keeping its
    iterations and verdicts. A job whose model or check spec was at fault answers 409."""

    def work(session: Session) -> tuple[int, JobOut, str]:
        jobs = JobRepository(session)
        job = jobs.for_team(team.id, job_id)
        if job is None:
            raise not_found(f"Job '{job_id}'")
        if job.queue == QUEUE_INTERACTIVE:
            raise ProblemError(
                409,
                "Job cannot be retried",
                f"Job '{job_id}' is interactive: no worker runs it, so there is nothing to resume. Start a new job "
                "with the same model (a failed answer step leaves its question open: answer it again instead).",
            )
        if not jobs.retry(job.id):
            retryable = ", ".join(c.value for c in RETRYABLE_ERRORS)
            why = f"failed with error code {job.error_code}" if job.error_code else _STATUS_PHRASES[job.status]
            raise ProblemError(
                409,
                "Job cannot be retried",
                f"Job '{job_id}' {why}; only jobs that failed with one of the error codes {retryable} can be "
                "retried (a job whose model or check spec was at fault needs a new job).",
            )
        queued = record_event(session, job.id, EventKind.QUEUED, {"status": JobStatus.QUEUED, "retry": True})
        session.refresh(job)
        return queued, _job_out(session, job, _workers_for(session, services, [job])), job.queue

    queued, out, queue = transaction(services.db, work, f"the retry of job {job_id}")
    services.job_reads.forget(team.id, job_id)
    services.notify(job_id, queued)
    try:
        services.enqueue(job_id, queue)
    except Exception:
        log.exception("enqueue of %s failed; worker recovery will pick it up", job_id)
    return out


@router.post("/{job_id}/verdict", response_model=JobOut)
async def post_verdict(job_id: str, body: VerdictIn, services: ServicesDep, team: TeamDep) -> Response:
    """An interactive job's verdict on the iteration it awaits (``awaiting_verdict``): ``fail`` when
    that iteration's model reproduces the failure, ``pass`` when it does not. The job then awaits
    the next iteration, or ends. 409: the job is not interactive, has ended, or awaits another
    iteration (a stale or repeated answer)."""
    job = await anyio.to_thread.run_sync(load_job, services, team.id, job_id)
    if job.queue != QUEUE_INTERACTIVE:
        raise ProblemError(
            409,
            "Job not interactive",
            f"Job '{job_id}' has an automatic check ({job.check_kind}); its verdicts come from its checks. "
            "Only jobs started with the check spec 'kind: interactive' take verdicts.",
        )
    seqs = await anyio.to_thread.run_sync(answer, services, team.id, job_id, body.iteration, body.verdict)
    services.job_reads.forget(team.id, job_id)
    for seq in seqs:
        services.notify(job_id, seq)
    body_json = await anyio.to_thread.run_sync(_job_json, services, team.id, job_id)
    return Response(body_json, media_type="application/json")

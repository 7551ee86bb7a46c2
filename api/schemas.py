"""Response bodies (pydantic), built from rows by small ``*_from_*`` converters."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from persistence.enums import JobTask
from persistence.models import Iteration, Job

# The largest event or iteration number a query may name: the 32-bit integer columns' range.
MAX_SEQ = 2**31 - 1


class Progress(BaseModel):
    iteration: int
    best_size: int | None
    checks_run: int
    cache_hits: int = 0  # verdicts answered without a check (the job's own cache or the farm's)
    farm_cache_hits: int = 0  # of those, answered from verdicts of earlier jobs (the farm cache)
    check_time_s: float
    mean_check_s: float | None
    eta_s: float | None


class ErrorInfo(BaseModel):
    code: str
    message: str | None


class ModelInfo(BaseModel):
    filename: str
    sha256: str
    size: int


class CheckInFlight(BaseModel):
    """A check of the job running now (any worker of the farm)."""

    iteration: int
    phase: str
    nodes: int
    worker: str | None
    started_at: datetime | None


class AwaitingVerdict(BaseModel):
    """An interactive job's check waiting for a person: download ``artifact``, then post the verdict."""

    iteration: int
    phase: str
    nodes: int
    artifact: str
    asked_at: datetime | None


class VerdictIn(BaseModel):
    """``fail``: the iteration model reproduces the failure; ``pass``: it does not."""

    iteration: int = Field(ge=1, le=MAX_SEQ)
    verdict: Literal["pass", "fail"]


class JobOut(BaseModel):
    id: str
    status: str
    task: str  # reduce | precision
    mode: str
    queue: str
    check_kind: str
    check_spec: str
    options: dict[str, Any]
    model: ModelInfo
    nodes_before: int | None
    nodes_after: int | None
    keep_fp32: list[str] | None = None  # a succeeded precision job: the nodes that must stay fp32
    # a bisect-releases job: its answer, or the strip of releases judged so far (api.release_answers)
    releases: dict[str, Any] | None = None
    # a bisect-passes job: its answer, or the probes run so far (api.passes_answers)
    passes: dict[str, Any] | None = None
    labels: dict[str, str] = {}
    """What the job was submitted with: the CI context ``onnx-reducer submit`` picks up (``ci``,
    ``repo``, ``commit``, ``branch``, ``run_url``, ``traceparent``) and ``--label key=value``."""
    progress: Progress
    error: ErrorInfo | None
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    waiting_reason: str | None = None
    # GET /v1/jobs/{id} only: the checks running now, and while queued where the job stands
    checks_in_flight: list[CheckInFlight] = []
    queue_position: int | None = None  # 1: the next job a free worker starts (fair share between teams)
    estimated_start_at: datetime | None = None
    flaky: dict[str, Any] | None = None
    """When verdicts were inconsistent: ``status`` ("flaky", or "repeatable" for a check that is
    not monotone), ``fails_percent`` (the estimated failure rate), ``runs``, ``failures``,
    ``repeats`` (passing runs a candidate needs), ``rechecks`` and the ``evidence``. Filled by
    ``GET /v1/jobs/{id}`` (null in job lists)."""
    awaiting_verdict: AwaitingVerdict | None = None
    verified: dict[str, Any] | None = None
    """A finished reduce job: how each model it hands over was verified, ``{min_bad, min_good}``,
    each ``{status, sha256, checks, verdict?, signature?}`` (null when not found); ``status``:
    ``judged`` (the very model a check judged), ``rechecked`` (checked once more as stored, and it
    agreed), ``disagrees`` (it did not: the job failed with ``unverified-result``), or for an
    interactive job whose stored model differs from the one the person judged ``not-rechecked``
    (a person is not asked again). With a bug-report bundle also ``bundle``: ``{checks, reused}``,
    the checks the bundle's self-check ran beyond ``checks_run`` and the models it did not check
    again (their exact bytes were verified above). Filled by
    ``GET /v1/jobs/{id}`` (null in job lists)."""
    suspect: dict[str, Any] | None = None
    """The check fails whatever the model: ``{message, evidence, crash, verdict, signature,
    output}`` (the answer says nothing about the model; ``onnx-reducer status`` exits 10). Filled by
    ``GET /v1/jobs/{id}``."""
    samples: dict[str, Any] | None = None
    """When the check judged several input samples (kinds compare, golden, error): ``original`` and
    ``min_bad`` (the best model so far; a precision job's: the mixed model), each ``{judged,
    failing}`` with the failing samples' indices in input order. Filled by ``GET /v1/jobs/{id}``."""
    links: dict[str, str]


class JobCreated(BaseModel):
    id: str
    status: str
    location: str


class JobList(BaseModel):
    items: list[JobOut]
    next_cursor: str | None


class IterationOut(BaseModel):
    number: int
    phase: str
    fingerprint: str
    nodes: int
    pending: bool
    verdict: str | None
    reproduces: bool | None
    signature: str | None
    detail: str | None
    duration_s: float | None
    output_tail: str | None
    artifact: str | None
    cached: str | None = None  # null: the check ran; "job" or "farm": answered from that cache
    late: bool = False  # its verdict landed after the job's end was planned: recorded, not the answer


class IterationList(BaseModel):
    items: list[IterationOut]
    next_after: int | None


class RuntimesOut(BaseModel):
    onnxruntime: str | None
    providers: list[str]
    tensorrt: str | None
    runtime_envs: list[str] = []  # other onnxruntime releases it runs checks in (RUNTIME_ENVS)


class WorkerCheckOut(BaseModel):
    iteration: int
    phase: str
    nodes: int
    started_at: datetime | None


class WorkerJobOut(BaseModel):
    id: str
    check: WorkerCheckOut | None


class WorkerOut(BaseModel):
    name: str
    host: str
    queues: list[str]
    state: str  # idle | busy | offline
    gpus: list[str]
    runtimes: RuntimesOut
    job: WorkerJobOut | None  # your team's job it is running; null when idle or running another team's
    started_at: datetime
    last_heartbeat: datetime
    jobs_done: int
    busy_s: float
    utilisation: float  # busy time / time since the worker started


class WorkerList(BaseModel):
    items: list[WorkerOut]
    online: int
    busy: int


def utc(value: datetime | None) -> datetime | None:
    """SQLite hands datetimes back without a zone; they were stored as UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


# A response field read from a row's datetime column (``model_validate(row)``), zoned as ``utc`` does.
UtcDatetime = Annotated[datetime, AfterValidator(utc)]


def remaining_checks(mode: str, best_size: int) -> int:
    """A rough count of the checks still to come (bisect windows, then the 1-minimal pass)."""
    bisect = 2 * math.ceil(math.log2(best_size + 1))
    return {"bisect": bisect, "linear": best_size}.get(mode, bisect + best_size)


def user_spec(job: Job, task: JobTask) -> str:
    """The check spec the job was submitted with: a bisect-releases job handed over before
    migration 0014 had its text rewritten to require the release it waited for (the user's kept in
    its session state); since then a hand-over changes only ``jobs.requires``."""
    if task is not JobTask.BISECT_RELEASES:
        return job.check_spec  # the state is deferred: loading it costs a query, and a deleted row a 500
    state = job.session_state or {}
    return str(state["spec"]) if isinstance(state.get("spec"), str) else job.check_spec


def job_from_row(
    job: Job,
    mean_check_s: float | None,
    waiting_reason: str | None = None,
    *,
    keep_fp32: list[str] | None = None,
    flaky: dict[str, Any] | None = None,
    awaiting: AwaitingVerdict | None = None,
    labels: dict[str, str] | None = None,
) -> JobOut:
    """``keep_fp32``: a finished precision job's answer (its ``mixed`` artifact's); ``flaky``: the
    check's estimated failure rate when it proved flaky (from the session state); ``awaiting``:
    the check an interactive job asks the user about."""
    eta = None
    if job.status == "running" and mean_check_s is not None and job.best_size is not None:
        eta = round(mean_check_s * remaining_checks(job.mode, job.best_size), 1)
    base = f"/v1/jobs/{job.id}"
    task = JobTask.of(job.options)
    links = {
        "self": base,
        "events": f"{base}/events",
        "iterations": f"{base}/iterations",
        "min_bad": f"{base}/artifacts/min-bad",
        "min_good": f"{base}/artifacts/min-good",
        "bundle": f"{base}/bundle",
        "original": f"{base}/artifacts/original",
        "cancel": f"{base}/cancel",
    }
    if task is JobTask.PRECISION:
        links = {k: v for k, v in links.items() if k not in ("min_bad", "min_good", "bundle")}
        links["mixed"] = f"{base}/artifacts/mixed"
    return JobOut(
        id=job.id,
        status=job.status,
        task=task.value,
        mode=job.mode,
        queue=job.queue,
        check_kind=job.check_kind,
        check_spec=user_spec(job, task),
        options=dict(job.options),
        model=ModelInfo(filename=job.model_filename, sha256=job.model_sha256, size=job.model_size),
        nodes_before=job.nodes_before,
        nodes_after=job.nodes_after,
        keep_fp32=keep_fp32,
        labels=labels or {},
        progress=Progress(
            iteration=job.iterations_done,
            best_size=job.best_size,
            checks_run=job.checks_run,
            cache_hits=job.cache_hits,
            farm_cache_hits=job.farm_hits,
            check_time_s=round(job.check_time_s, 4),
            mean_check_s=round(mean_check_s, 4) if mean_check_s is not None else None,
            eta_s=eta,
        ),
        error=ErrorInfo(code=job.error_code, message=job.error_message) if job.error_code else None,
        attempts=job.attempts,
        created_at=utc(job.created_at) or job.created_at,
        started_at=utc(job.started_at),
        finished_at=utc(job.finished_at),
        waiting_reason=waiting_reason,
        flaky=flaky,
        awaiting_verdict=awaiting,
        links=links,
    )


def iteration_from_row(row: Iteration) -> IterationOut:
    return IterationOut(
        number=row.number,
        phase=row.phase,
        fingerprint=row.fingerprint,
        nodes=row.node_count,
        pending=row.pending,
        verdict=row.verdict,
        reproduces=row.reproduces,
        signature=row.signature,
        detail=row.detail,
        duration_s=row.duration_s,
        output_tail=row.output_tail,
        artifact=f"/v1/jobs/{row.job_id}/artifacts/iteration-{row.number}" if row.artifact_id else None,
        cached=row.cached,
        late=row.late,
    )

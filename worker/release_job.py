"""The service's side of a ``task: bisect-releases`` job: the first onnxruntime release on which the
job's model fails and the last that passes, each release's check run by a worker that advertises
that release (its own onnxruntime, or one of its ``RUNTIME_ENVS``: ``worker.release_envs``).

The search is ``reducer_core.release_bisect`` (the newest release first, then halving: at most
``ceil(log2 R) + 1`` releases checked, repeats for a flaky check), rebuilt at every step from the
runs stored in the job's ``session_state`` (``{"releases", "runs", "spec"}``). The releases are
the job's ``releases`` option, else every release the farm's workers advertise when the job
starts.

One worker runs the probes it can; for a release it does not offer it hands the job on: the job
goes back to ``queued`` with its ``jobs.requires`` asking for exactly that release (so only a
worker offering it claims it: ``worker.run_job``), the hand-over not counted as a failed attempt,
and the workers of its queue are woken. Its spec (the text and ``jobs.spec``) stays the user's;
the user's requirements come back when the job ends. Every run
is an iteration row (phase ``release <version>``, its ``repeat`` in the fingerprint) and counts in
``checks_run``; the answer (``ReleaseAnswer.to_json``, with the iteration numbers of both named
verdicts) is kept in the session state and added to the success event (``releases``). A job
started from a reduce job (``source_job_id``, ``worker.source_job``) runs on that job's min-bad
unless its ``on`` is ``original`` (each worker it is handed to places the min-bad in its own work
folder), and gets that job's bug-report bundle with the answer in it as ``releases.json`` (the
job's ``bundle`` artifact)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from checks.runtime_envs import RuntimeEnv
from checks.spec import CheckSpec
from jobflow.ending import JobCancelledError, succeed
from persistence.enums import JobStatus
from persistence.options import JobOptions
from persistence.repositories import IterationRepository, JobRepository, WorkerRepository
from persistence.retry import transaction
from persistence.store import StoredBlob
from reducer_core.errors import CheckInfraError, UsageError
from reducer_core.release_bisect import (
    ReleaseAnswer,
    ReleaseBisection,
    ReleaseError,
    ReleaseInfraError,
    Run,
    order_releases,
    release_key,
    replay,
)
from reducer_core.verdict import Verdict
from worker.checking import job_check
from worker.context import RunnerContext
from worker.job_hold import going_on, held, probing, stop_if_asked
from worker.prepared import JobInput, PreparedJob
from worker.source_job import SourceJob, answer_bundle, bisected_model, keep_bundle, source_of

log = logging.getLogger("onnx_reducer.worker")
TASK = "bisect-releases"
OUTPUT_TAIL = 4000


@dataclass(frozen=True)
class _Stored:
    releases: tuple[str, ...] | None
    runs: tuple[Run, ...]
    spec_text: str  # the user's spec (a job handed over before migration 0014 had its own text rewritten)
    requires: dict[str, Any]  # the job's now (``jobs.requires``): the user's, or requiring the release it waits for
    flaky: bool
    pinned: bool
    queue: str
    source: SourceJob | None = None  # the reduce job it was started from


def run_release_job(ctx: RunnerContext, job_id: str, attempt: int) -> None:
    """Run after ``JobRepository.claim`` gave this worker a bisect-releases job (``start_job``)."""
    stored, job_input = _load(ctx, job_id)
    releases = stored.releases or farm_releases(ctx)
    try:
        search = replay(releases, stored.runs, stored.flaky, stored.pinned)
    except ReleaseError as exc:
        raise UsageError(f"bisect-releases: {exc}") from None
    with probing(ctx, job_id, job_input, "a release was checked") as prepared:
        _probe_until_done_or_elsewhere(ctx, job_id, attempt, stored, search, prepared)


def _probe_until_done_or_elsewhere(
    ctx: RunnerContext,
    job_id: str,
    attempt: int,
    stored: _Stored,
    search: ReleaseBisection,
    prepared: PreparedJob,
) -> None:
    spec = prepared.spec  # the user's, as stored at intake (``jobs.spec``)
    model, nodes = bisected_model(ctx.layout.store, stored.source, prepared)
    while (release := search.next_release()) is not None:
        here, env = where_to_run(ctx, release)
        if not here:
            _hand_over(ctx, job_id, attempt, stored, search, requiring(spec, release))
            return
        stop_if_asked(ctx, job_id)
        verdict, output = _run_probe(ctx, prepared, spec, env, model)
        repeat = search.next_repeat()
        try:
            search.record(release, verdict)
        except ReleaseInfraError as exc:
            raise CheckInfraError(str(exc)) from None
        fails = search.counts_as_failing(verdict)
        log.info("job %s: onnxruntime %s (run %d): %s", job_id, release, repeat + 1, verdict.kind.value)
        _record(ctx, job_id, attempt, Run(release, repeat, verdict), fails, output, nodes, stored, search)
    answer = search.answer()
    bundle = answer_bundle(ctx.layout.store, stored.source, prepared.work_dir, "releases.json", answer.to_json())
    _finish(ctx, job_id, attempt, stored, answer, nodes, bundle, spec.requires.to_json())


def where_to_run(ctx: RunnerContext, release: str) -> tuple[bool, RuntimeEnv | None]:
    """Whether this worker runs ``release`` and in which environment (None: its own python)."""
    own = ctx.capabilities.onnxruntime if ctx.capabilities is not None else _own_onnxruntime()
    if own is not None and _same(own, release):
        return True, None
    for env in ctx.runtime_envs:
        if _same(env.release, release):
            return True, env
    return False, None


def _same(version: str, release: str) -> bool:
    try:
        return release_key(version) == release_key(release)
    except ReleaseError:
        return False


def _own_onnxruntime() -> str | None:
    from importlib import metadata  # noqa: PLC0415 - only for a worker that detected no capabilities

    try:
        return metadata.version("onnxruntime")
    except metadata.PackageNotFoundError:
        return None


def farm_releases(ctx: RunnerContext) -> tuple[str, ...]:
    """Every onnxruntime release the farm's workers advertise now (their own and RUNTIME_ENVS')."""
    with ctx.db.session() as session:
        rows = WorkerRepository(session).all()
        offered = {str(v) for row in rows for v in _advertised(row.capabilities or {})}
    by_key: dict[object, str] = {}
    for version in offered:
        try:
            by_key.setdefault(release_key(version), version)
        except ReleaseError:
            continue
    try:
        return order_releases(by_key.values())
    except ReleaseError as exc:
        raise UsageError(
            f"bisect-releases: the farm's workers advertise {len(by_key)} onnxruntime release(s) ({exc}); give the "
            "job's 'releases' field, and workers with RUNTIME_ENVS for each (docs/deployment.md)"
        ) from None


def _advertised(capabilities: dict[str, Any]) -> list[str]:
    own = capabilities.get("onnxruntime")
    return [*([own] if own else []), *(capabilities.get("runtime_envs") or [])]


def _load(ctx: RunnerContext, job_id: str) -> tuple[_Stored, JobInput]:
    with ctx.db.session() as session:
        job = going_on(ctx, JobRepository(session).get(job_id))
        state = dict(job.session_state or {})
        options = JobOptions.from_stored(job.mode, job.options)
        releases = state.get("releases") or options.releases
        stored = _Stored(
            releases=tuple(str(r) for r in releases) if releases else None,
            runs=tuple(Run.from_json(r) for r in state.get("runs", [])),
            spec_text=str(state.get("spec") or job.check_spec),
            requires=dict(job.requires),
            flaky=options.flaky,
            pinned=options.pin_signature,
            queue=job.queue,
            source=source_of(session, job),
        )
        return stored, JobInput.of(session, job)


def _run_probe(
    ctx: RunnerContext, prepared: PreparedJob, spec: CheckSpec, env: RuntimeEnv | None, model: Path
) -> tuple[Verdict, str]:
    """``spec``'s verdict on ``model`` (the job's own, or its source's min-bad) in ``env``."""
    golden = prepared.session_check.golden
    check = job_check(spec, prepared.work_dir, ctx.allow_command, ctx.check_memory_limit_bytes, golden, env)
    return check.run(model)


def _state(stored: _Stored, search: ReleaseBisection, answer: dict[str, Any] | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {
        "task": TASK,
        "releases": list(search.releases),
        "runs": [run.to_json() for run in search.runs],
        "spec": stored.spec_text,
    }
    if answer is not None:
        state["answer"] = answer
    return state


def _record(
    ctx: RunnerContext,
    job_id: str,
    attempt: int,
    run: Run,
    fails: bool,
    output: str,
    nodes: int,
    stored: _Stored,
    search: ReleaseBisection,
) -> None:
    def write(session: Session) -> None:
        job = held(session, job_id, attempt)
        iterations = IterationRepository(session)
        row = iterations.start(job_id, f"release {run.release}", f"{run.release}#{run.repeat}", nodes)
        verdict = run.verdict
        iterations.finish(row, verdict.kind.value, fails, verdict.signature, verdict.detail)
        row.duration_s, row.output_tail = verdict.duration_s, output[-OUTPUT_TAIL:]
        job.checks_run += 1
        job.iterations_done += 1
        job.check_time_s += verdict.duration_s
        job.nodes_before = nodes
        job.session_state = _state(stored, search)
        job.state_version += 1

    transaction(ctx.db, write, f"job {job_id}: recording a release's verdict")


def _hand_over(
    ctx: RunnerContext, job_id: str, attempt: int, stored: _Stored, search: ReleaseBisection, routed: _Routed
) -> None:
    """Queue the job again for a worker that offers ``routed.release`` (module doc). A job handed
    to this worker for that very release (a worker that takes any job, or whose RUNTIME_ENVS
    changed) fails instead of going round in a circle. A cancel asked for while its last release ran
    ends it here (the row is locked: a cancel comes before or after, never between)."""
    release = routed.release
    if stored.requires != routed.user and stored.requires == routed.requires:
        raise UsageError(
            f"bisect-releases: onnxruntime {release} was asked of this worker, which cannot run it; start a "
            f"worker that offers it (RUNTIME_ENVS={release}=PYTHON, docs/deployment.md), or leave it out of 'releases'"
        )

    def write(session: Session) -> str:
        job = held(session, job_id, attempt)
        if job.cancel_requested:  # queued again it would wait for ever: no claim takes a cancelled job
            raise JobCancelledError()
        job.requires = routed.requires  # only a worker offering the release takes it
        job.session_state = _state(stored, search)
        job.state_version += 1
        job.status = JobStatus.QUEUED
        job.lease_expires_at = None
        job.attempts = max(0, job.attempts - 1)  # a hand-over is no failed attempt
        return job.queue

    queue = transaction(ctx.db, write, f"job {job_id}: handing it to a worker with onnxruntime {release}")
    log.info("job %s: onnxruntime %s is not offered here; queued again for a worker that offers it", job_id, release)
    ctx.wake(job_id, queue)


@dataclass(frozen=True)
class _Routed:
    release: str
    user: dict[str, Any]  # the requirements of the user's spec
    requires: dict[str, Any]  # those, ``onnxruntime`` exactly ``release``


def requiring(spec: CheckSpec, release: str) -> _Routed:
    """The job's requirements while it waits for ``release``: the spec's, with ``onnxruntime`` exactly it."""
    user = spec.requires.to_json()
    return _Routed(release, user, {**user, "onnxruntime": f"=={release}"})


def _finish(
    ctx: RunnerContext,
    job_id: str,
    attempt: int,
    stored: _Stored,
    answer: ReleaseAnswer,
    nodes: int,
    bundle: tuple[StoredBlob, dict[str, Any]] | None,
    user_requires: dict[str, Any],
) -> None:
    def write(session: Session) -> int:
        job = held(session, job_id, attempt)
        keep_bundle(session, job_id, bundle)
        data = with_iteration_links(job_id, answer.to_json(), IterationRepository(session).list(job_id, 0, 1000))
        job.check_spec = stored.spec_text  # a job handed over before migration 0014 had its text rewritten
        job.requires = user_requires
        job.nodes_before = job.nodes_after = nodes
        job.session_state = {**(job.session_state or {}), "answer": data}
        job.state_version += 1
        return succeed(session, job, {"task": TASK, "releases": data})

    seq = transaction(ctx.db, write, f"job {job_id}: storing the release bisection's answer")
    ctx.notify(job_id, seq)
    log.info("job %s: %s", job_id, answer.message())


def with_iteration_links(job_id: str, data: dict[str, Any], rows: Any) -> dict[str, Any]:
    """``data`` with the iteration numbers (and links) of the two verdicts it names: the settling
    run of the first failing and of the last passing release."""
    numbers = {row.fingerprint: row.number for row in rows}
    for key in ("first_failing_verdict", "last_passing_verdict"):
        verdict = data.get(key)
        if not isinstance(verdict, dict):
            continue
        number = numbers.get(f"{verdict['release']}#{int(verdict['runs']) - 1}")
        verdict["iteration"] = number
        if number is not None:
            verdict["link"] = f"/v1/jobs/{job_id}/iterations?after={number - 1}&limit=1"
    return data

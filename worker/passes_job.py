"""The service's side of a ``task: bisect-passes`` job: which onnxruntime graph optimizers (or
TensorRT builder flags and tactic sources) the job's failure needs (``engine.pass_bisect``, the
command line's ``bisect-passes``), run on the job's model by the worker that claimed it.

Each probe is the job's check (``worker.checking.job_check``: the job's memory limit, golden
values, command policy) with the target's disabled list or level changed; it is an iteration row
(phase ``passes <role>``, its disabled list as fingerprint) and counts in ``checks_run``. The
probes so far are in the job's ``session_state`` (``{"task", "probes"}``); the answer
(``PassAnswer.to_json``) is added there (``answer``) and to the success event (``passes``). A cancel
or the time limit stops it after the probe that runs; a job taken again after its worker died
rebuilds the search from its stored probes (``PassBisection.replayed``: their checks do not run
again) and runs only the probes that had not ended.

A job started from a reduce job (``source_job_id``, ``worker.source_job``) runs on that job's
min-bad unless its ``on`` is ``original``, and its answer goes into a copy of that job's
bug-report bundle as ``passes.json`` (the job's ``bundle`` artifact)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from checks.spec import CheckSpec, ModelCheck
from engine.pass_bisect import PassBisection
from jobflow.ending import succeed
from persistence.options import JobOptions
from persistence.repositories import IterationRepository, JobRepository
from persistence.retry import transaction
from persistence.store import StoredBlob
from reducer_core.pass_bisect import PassAnswer, ProbeRecord
from reducer_core.verdict import Pinning
from worker.checking import job_check
from worker.context import RunnerContext
from worker.job_hold import going_on, held, probing, stop_if_asked
from worker.prepared import JobInput, PreparedJob
from worker.source_job import SourceJob, answer_bundle, bisected_model, keep_bundle, source_of

log = logging.getLogger("onnx_reducer.worker")
TASK = "bisect-passes"


def run_passes_job(ctx: RunnerContext, job_id: str, attempt: int) -> None:
    """Run after ``JobRepository.claim`` gave this worker a bisect-passes job (``start_job``)."""
    pinning, stored, job_input, source = _load(ctx, job_id)
    with probing(ctx, job_id, job_input, "its optimizers were bisected") as prepared:
        model, nodes = bisected_model(ctx.layout.store, source, prepared)
        answer = _search(ctx, job_id, attempt, prepared.spec, pinning, stored, prepared, model, nodes)
        bundle = answer_bundle(ctx.layout.store, source, prepared.work_dir, "passes.json", answer.to_json())
        _finish(ctx, job_id, attempt, answer, nodes, bundle)


def _search(
    ctx: RunnerContext,
    job_id: str,
    attempt: int,
    spec: CheckSpec,
    pinning: Pinning,
    stored: list[ProbeRecord],
    prepared: PreparedJob,
    model: Path,
    nodes: int,
) -> PassAnswer:
    golden = prepared.session_check.golden

    def build(probed: CheckSpec) -> ModelCheck:
        stop_if_asked(ctx, job_id)
        return job_check(probed, prepared.work_dir, ctx.allow_command, ctx.check_memory_limit_bytes, golden)

    def heard(probe: ProbeRecord) -> None:  # a probe that ran now (a stored one is not heard again)
        _record(ctx, job_id, attempt, probe, search.answer.probes, nodes)

    search = PassBisection(
        spec, model, golden, pinning, ctx.allow_command, heard, prepared.work_dir, build, replayed=stored
    )
    if stored:
        log.info("job %s: the pass bisection goes on from its %d stored probes", job_id, len(stored))
    return search.run()


def _load(ctx: RunnerContext, job_id: str) -> tuple[Pinning, list[ProbeRecord], JobInput, SourceJob | None]:
    with ctx.db.session() as session:
        job = going_on(ctx, JobRepository(session).get(job_id))
        pinning = Pinning.of(JobOptions.from_stored(job.mode, job.options).pin_signature)
        state = job.session_state or {}
        stored = [ProbeRecord.from_json(p) for p in state.get("probes", [])] if state.get("task") == TASK else []
        return pinning, stored, JobInput.of(session, job), source_of(session, job)


def _record(
    ctx: RunnerContext, job_id: str, attempt: int, probe: ProbeRecord, probes: list[ProbeRecord], nodes: int
) -> None:
    def write(session: Session) -> None:
        job = held(session, job_id, attempt)
        iterations = IterationRepository(session)
        fingerprint = f"{probe.role}:{probe.level}:{','.join(probe.disabled)}"
        row = iterations.start(job_id, f"passes {probe.role}", fingerprint[:200], nodes)
        iterations.finish(row, probe.verdict, probe.reproduces, probe.signature, probe.detail)
        row.duration_s = probe.duration_s
        job.check_time_s += probe.duration_s
        job.checks_run += 1
        job.iterations_done += 1
        job.nodes_before = nodes
        job.session_state = {"task": TASK, "probes": [p.to_json() for p in probes]}
        job.state_version += 1

    transaction(ctx.db, write, f"job {job_id}: recording a pass bisection's probe")


def _finish(
    ctx: RunnerContext,
    job_id: str,
    attempt: int,
    answer: PassAnswer,
    nodes: int,
    bundle: tuple[StoredBlob, dict[str, Any]] | None,
) -> None:
    data: dict[str, Any] = answer.to_json()

    def write(session: Session) -> int:
        job = held(session, job_id, attempt)
        keep_bundle(session, job_id, bundle)
        job.nodes_before = job.nodes_after = nodes
        job.session_state = {**(job.session_state or {}), "task": TASK, "answer": data}
        job.state_version += 1
        return succeed(session, job, {"task": TASK, "passes": data})

    seq = transaction(ctx.db, write, f"job {job_id}: storing the pass bisection's answer")
    ctx.notify(job_id, seq)
    log.info("job %s: %s", job_id, answer.message())

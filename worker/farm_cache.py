"""The farm verdict cache: a job answers without a check every candidate that another job already
checked on the same model, check and runtime, and shares each verdict it gets for later jobs.

A verdict is kept in ``farm_verdicts`` under its team, the candidate's fingerprint and a *scope*
that digests everything else it depends on: the uploaded model's sha256 (weights included), the
session's verdict identity (graph fingerprint, check spec, golden values, workspace options) and
the runtime of the worker that ran it (onnxruntime version and execution providers, TensorRT
version, GPU models, the worker's check memory limit). A job reads its own team's verdicts, or
every team's when the operator sets ``SHARE_VERDICTS_ACROSS_TEAMS`` (a verdict tells something
about a model). Infrastructure errors are never shared (they are no verdict about the model), nor
are verdicts of checks without a spec (a ``--check`` command line, interactive answers) or of a
worker whose runtime is unknown.

When a job's session starts (or resumes) the farm's verdicts are merged into its ``VerdictCache``
(never over a verdict of its own: ``ReductionMachine.seed``), once, so the session's machine
answers those candidates as cache hits: no check runs and no worker time is spent. The session's
state remembers which cached verdicts came from the farm (``IterationRecord.source``). Every cached
answer, from the farm or from the job's own verdicts, is stored as an iteration row marked
``cached`` with an event, and counted in the job's ``cache_hits`` (``farm_hits``: those from the
farm). The layerwise run's result of a compare/golden job is shared the same way (a later job
localises without running it)."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from checks.capabilities import Capabilities
from engine.session import ReductionSession
from persistence.models import Job
from persistence.repositories import FarmVerdictRepository
from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.localization import LayerwiseResult
from reducer_core.verdict import Verdict, VerdictKind
from worker.context import RunnerContext
from worker.release_envs import job_runtime

log = logging.getLogger("onnx_reducer.worker")
LAYERWISE = "layerwise"  # the fingerprint the layerwise run's result is kept under


def runtime_identity(runtime: Capabilities, memory_limit_bytes: int | None) -> str:
    """What a verdict depends on in the worker that ran it (the order of GPUs and providers aside)."""
    document = {
        "onnxruntime": runtime.onnxruntime,
        "providers": sorted(runtime.providers),
        "tensorrt": runtime.tensorrt,
        "gpus": sorted(set(runtime.gpus)),
        "memory_limit": memory_limit_bytes,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def farm_scope(model_sha256: str, cache: VerdictCache, runtime: str) -> str:
    """The key of a session's verdicts in the farm, besides the candidate: model bytes, graph,
    verdict identity (check and options) and runtime."""
    document = {"model": model_sha256, "graph": cache.graph, "check": cache.check, "runtime": runtime}
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def job_scope(ctx: RunnerContext, job: Job, reduction: ReductionSession) -> str | None:
    """The farm scope of ``job``'s verdicts; None when they are not shared (farm cache off, an
    unknown runtime, a check without a spec)."""
    runtime_of_job = job_runtime(ctx, reduction.check.spec)  # a RUNTIME_ENVS release's, where it runs there
    if not ctx.farm_verdict_cache or runtime_of_job is None or reduction.check.spec is None:
        return None
    runtime = runtime_identity(runtime_of_job, ctx.check_memory_limit_bytes)
    return farm_scope(job.model_sha256, reduction.cache, runtime)


@dataclass
class FarmLink:
    """A job's link to the farm's verdicts inside one transaction of ``worker.advance`` (the job's
    row locked by it): ``seed`` (at the job's start) gives the session the farm's verdicts,
    ``share`` keeps a verdict this worker's check gave (``jobflow.recording`` records the cached
    answers: each record says which cache gave it, ``IterationRecord.source``)."""

    db: Session
    job: Job
    scope: str | None
    layerwise: LayerwiseResult | None = None  # the farm's layerwise result seeded now (its errors: worker.advance)

    @classmethod
    def open(cls, ctx: RunnerContext, db: Session, job: Job, reduction: ReductionSession) -> FarmLink:
        return cls(db, job, job_scope(ctx, job, reduction))

    def seed(self, ctx: RunnerContext, reduction: ReductionSession) -> int:
        """Give ``reduction`` the verdicts (and layerwise result) the farm holds in the job's scope
        (a seeded candidate is answered as a cache hit when the flow reaches it); how many were new."""
        if self.scope is None:
            return 0
        shared = FarmVerdictRepository(self.db).known(self.scope, self.job.team_id, ctx.share_verdicts_across_teams)
        layerwise = next((s.verdict for s in shared if s.fingerprint == LAYERWISE), None)
        verdicts = {s.fingerprint: s.verdict for s in shared if s.fingerprint != LAYERWISE}
        if layerwise is not None and reduction.machine.layerwise is None:
            self.layerwise = LayerwiseResult.from_json(layerwise)
        return reduction.machine.seed(verdicts, self.layerwise.compact() if self.layerwise else None)

    def share(self, candidate: Candidate, verdict: Verdict) -> None:
        """Keep a verdict a check of this job gave on this worker, for later jobs (not an
        infrastructure error)."""
        if self.scope is None or verdict.kind is VerdictKind.INFRA_ERROR:
            return
        FarmVerdictRepository(self.db).add(
            self.job.team_id, self.scope, candidate.fingerprint, verdict.to_json(), self.job.id
        )

    def share_layerwise(self, result: LayerwiseResult) -> None:
        """Keep the layerwise run's result of a compare/golden job (unless it could not run): a later
        job in the scope localises without running it (not listed as an iteration: it is no
        candidate's verdict)."""
        if self.scope is None or result.verdict.kind is VerdictKind.INFRA_ERROR:
            return
        FarmVerdictRepository(self.db).add(self.job.team_id, self.scope, LAYERWISE, result.to_json(), self.job.id)

"""The closed vocabularies of the service."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any


class JobStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHING = "finishing"  # the search is done: a worker stores and verifies its answer (a finish unit)
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)

    @property
    def active(self) -> bool:
        """Started and not ended: running its checks, or finishing (its answer stored and verified)."""
        return self in ACTIVE_STATUSES


ACTIVE_STATUSES = (JobStatus.RUNNING, JobStatus.FINISHING)
TERMINAL_STATUSES = tuple(s for s in JobStatus if s.terminal)


class ArtifactKind(enum.StrEnum):
    ORIGINAL = "original"
    WEIGHTS = "weights"
    ITERATION = "iteration"
    MIN_BAD = "min-bad"
    MIN_GOOD = "min-good"
    GOLDEN = "golden"  # the golden values uploaded with the job (a golden zip or Polygraphy JSON)
    INPUTS = "inputs"  # input samples uploaded with the job: names inputs-0, inputs-1... (.npz or Polygraphy JSON)
    MIXED = "mixed"  # a precision job's mixed-precision model; meta["keep_fp32"]: the nodes kept fp32
    BUNDLE = "bundle"  # a reduce job's bug-report bundle (engine.report_bundle)
    # a compare/golden job's per-tensor errors of its layerwise run (reducer_core.localization.TensorErrors, JSON)
    NODE_ERRORS = "node-errors"


class JobTask(enum.StrEnum):
    """What a job does: ``reduce`` (the default) a failing model, or find which nodes must stay fp32
    (``precision``). Kept in the job's options as ``task`` (absent: ``reduce``)."""

    REDUCE = "reduce"
    PRECISION = "precision"
    BISECT_RELEASES = "bisect-releases"  # the first onnxruntime release that fails (worker.release_job)
    BISECT_PASSES = "bisect-passes"  # the runtime optimizers the failure needs (worker.passes_job)

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> JobTask:
        return cls(str(options.get("task", cls.REDUCE.value)))


class EventKind(enum.StrEnum):
    QUEUED = "job.queued"
    STARTED = "job.started"
    FINISHING = "job.finishing"  # the search is done: a finish unit stores and verifies the answer
    ITERATION = "iteration"
    CHECK_STARTED = "check_started"  # a worker took one of the job's checks (its iteration event ends it)
    SUCCEEDED = "job.succeeded"
    FAILED = "job.failed"
    CANCELLED = "job.cancelled"
    VERDICT_NEEDED = "verdict.needed"  # an interactive job's check waits for a person's verdict

    @property
    def terminal(self) -> bool:
        return self in (EventKind.SUCCEEDED, EventKind.FAILED, EventKind.CANCELLED)

    @property
    def changes_status(self) -> bool:
        """The job's status, or the verdict it awaits, changes with this event (progress events,
        an iteration or a check started, do not)."""
        return self not in (EventKind.ITERATION, EventKind.CHECK_STARTED)


class ErrorCode(enum.StrEnum):
    ORIGINAL_DID_NOT_FAIL = "original-did-not-fail"
    INVALID_MODEL = "invalid-model"
    CHECK_INFRA_ERROR = "check-infra-error"
    INVALID_CHECK = "invalid-check"
    TOO_MANY_ATTEMPTS = "too-many-attempts"
    TIME_LIMIT = "time-limit-exceeded"
    INTERNAL = "internal-error"
    # a final model did not get its verdict when checked once more as stored (worker.final_checks)
    UNVERIFIED_RESULT = "unverified-result"

"""A job's options, typed (``JobOptions``): what the upload form asks for, what the job row stores
(``jobs.mode`` and the ``jobs.options`` JSON) and what the worker runs with, one object for the
api, the worker and the command line.

Each default is stated once. The reduction's own defaults (mode, reduce_inputs, reduce_outputs,
pin_signature, confirm_flaky, reduce_data) are ``SessionConfig``'s, the pure core's, which
``onnx-reducer reduce`` runs with too; the rest (task, allow_nonfinite, releases, flaky) here. Two
rules change a default, each in one place:

- ``for_new_job``: an interactive job (a person answers every check) does not confirm small
  answers (``confirm_flaky`` off), as ``onnx-reducer reduce`` without ``--check``: the person
  would be asked the same question again.
- ``from_stored``: a row stored before an option existed reads as the job then ran
  (``STORED_BEFORE``: ``confirm_flaky`` off, so its saved session resumes unchanged); keys this
  code does not know are kept (``extra``) and stored back unchanged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from persistence.enums import JobTask
from reducer_core.config import SessionConfig

_SESSION = SessionConfig()  # the core's defaults: the command line's and the service's

# the form's true/false fields of a reduction (stored with every new job, each true or false)
REDUCE_FLAGS = ("reduce_inputs", "reduce_outputs", "pin_signature", "confirm_flaky", "reduce_data")
# what a row stored before an option existed means by its absence (the job ran without it)
STORED_BEFORE: Mapping[str, Any] = {"confirm_flaky": False}


@dataclass(frozen=True)
class JobOptions:
    """One job's options (module doc). ``mode`` is stored in its own column, the rest in
    ``jobs.options``: the reduce flags always, the task's options when the task is not ``reduce``."""

    mode: str = _SESSION.mode
    reduce_inputs: bool = _SESSION.reduce_inputs
    reduce_outputs: bool = _SESSION.reduce_outputs
    pin_signature: bool = bool(_SESSION.pin_signature)
    confirm_flaky: bool = _SESSION.confirm_flaky
    reduce_data: bool = _SESSION.reduce_data
    task: JobTask = JobTask.REDUCE
    allow_nonfinite: bool = False  # precision: keep the search's answer, inf in fp16 tensors or not
    releases: tuple[str, ...] | None = None  # bisect-releases: None, every release the farm advertises
    flaky: bool = False  # bisect-releases: the check fails only some of the time
    extra: Mapping[str, Any] = field(default_factory=dict)  # stored keys this code does not know, kept

    @classmethod
    def for_new_job(cls, interactive: bool = False) -> JobOptions:
        """The options of an upload (or a command line) that sets none: a person's verdicts are
        not asked twice (``confirm_flaky`` off for an interactive job)."""
        return cls(confirm_flaky=False) if interactive else cls()

    @classmethod
    def from_stored(cls, mode: str, stored: Mapping[str, Any]) -> JobOptions:
        """A job row's options: a key the row lacks has its ``STORED_BEFORE`` meaning, else its
        default; unknown keys are kept in ``extra``."""
        known = {f.name for f in fields(cls)} - {"mode", "extra"}
        values: dict[str, Any] = {**STORED_BEFORE, **{k: v for k, v in stored.items() if k in known}}
        for name in (*REDUCE_FLAGS, "allow_nonfinite", "flaky"):
            if name in values:
                values[name] = _flag(values[name])
        if "task" in values:
            values["task"] = JobTask(str(values["task"]))
        if values.get("releases") is not None:
            values["releases"] = tuple(str(r) for r in values["releases"])
        extra = {k: v for k, v in stored.items() if k not in known}
        return cls(mode=mode, extra=extra, **values)

    def to_stored(self) -> dict[str, Any]:
        """The ``jobs.options`` JSON: the reduce flags, the task's options when not ``reduce``
        (a reduce job stores no ``task``, as jobs stored before tasks existed), the kept keys."""
        stored = dict(self.extra)
        stored |= {name: getattr(self, name) for name in REDUCE_FLAGS}
        if self.task is not JobTask.REDUCE:
            stored["task"] = self.task.value
        if self.task is JobTask.PRECISION and self.allow_nonfinite:
            stored["allow_nonfinite"] = True
        if self.task is JobTask.BISECT_RELEASES:
            if self.releases is not None:
                stored["releases"] = list(self.releases)
            stored["flaky"] = self.flaky
        return stored

    def session_config(self) -> SessionConfig:
        """The reduction session this job runs: its options; min-good always wanted (it is stored),
        localisation on."""
        return SessionConfig(
            mode=self.mode,
            reduce_inputs=self.reduce_inputs,
            reduce_outputs=self.reduce_outputs,
            pin_signature=self.pin_signature,
            confirm_flaky=self.confirm_flaky,
            reduce_data=self.reduce_data,
            localize=True,
            min_good=True,
        )


def _flag(value: Any) -> bool:
    """A stored true/false (a string, as ``pin_signature: off`` might be: off, false, 0 and no are false)."""
    if isinstance(value, str):
        return value.strip().lower() not in ("off", "false", "0", "no", "")
    return bool(value)

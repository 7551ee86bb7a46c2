"""The reduction session shared by ``onnx-reducer reduce`` and the service worker.

``ReductionSession`` puts together, in one place, what both need around the pure step machine
(``reducer_core.machine.ReductionMachine``): the prepared model (``Workspace``), the check and its
verdict-cache identity (check + workspace options + golden values), whether to localise (the
accuracy flowchart for compare/golden specs), the layerwise run, and writing candidates (the
pre-serialised fast path). A driver either runs it to the end with ``run(hooks)``, or asks for
work itself (``next_requests`` / ``deliver``) and keeps ``state()`` to resume it anywhere.

    session = ReductionSession.start(workspace, SessionCheck(check, spec, golden), config)
    result = session.run(hooks)          # hooks: write_iteration, run_check, on_record, ...
    result = session.run_in_slots(hooks, 4)   # hooks: prepare, finish, on_record, ... (engine.parallel)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checks.interactive import InteractiveCheck
from checks.spec import CheckSpec, ModelCheck
from engine.localize import layerwise_run
from engine.parallel import SlotWork, drive_parallel
from engine.workspace import ReduceOptions, Workspace
from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.driver import drive
from reducer_core.errors import MissingTypeError
from reducer_core.localization import LayerwiseResult
from reducer_core.machine import ReductionMachine
from reducer_core.records import IterationRecord, Localization, ReductionResult
from reducer_core.requests import Answer, CheckRequest, LayerwiseRequest, Request, SessionListener, SilentListener
from reducer_core.verdict import Goal, Verdict, VerdictKind
from reducer_core.verification import file_sha256


@dataclass(frozen=True)
class SessionCheck:
    """The check of a session: the runnable ``check``, the ``spec`` it was built from (None for a
    ``--check`` command or interactive mode) and the golden values it reads (``golden_sha256``:
    their digest, computed from the file when not given). ``task``: what a verdict is about
    (``reduce``: a subgraph; ``precision``: the whole model with a set of nodes kept fp32)."""

    check: ModelCheck
    spec: CheckSpec | None = None
    golden: Path | None = None
    golden_sha256: str | None = None
    task: str = "reduce"

    def __post_init__(self) -> None:
        if self.golden is not None and self.golden_sha256 is None:
            object.__setattr__(self, "golden_sha256", file_sha256(self.golden))

    @property
    def identity(self) -> str:
        """What decides a verdict besides the model: the spec (or the command), and the golden values."""
        base = self.spec.identity if self.spec is not None else self.check.identity
        base += f" golden=sha256:{self.golden_sha256}" if self.golden_sha256 else ""
        return base + (f" task={self.task}" if self.task != "reduce" else "")


def verdict_identity(check: SessionCheck, options: ReduceOptions) -> str:
    """The verdict cache's identity: cached verdicts, replays and saved sessions apply only to the
    same check (and golden values) on candidates shaped by the same options."""
    return f"{check.identity} | {options.identity}"


def resolve_config(config: SessionConfig, spec: CheckSpec | None) -> SessionConfig:
    """Localise compare/golden specs only (``config.localize`` False: the user said no); a
    ``Goal.PASS`` session (precision) never localises."""
    if spec is None or config.goal is Goal.PASS:
        return dataclasses.replace(config, localize=False, not_localized="")
    if not spec.is_accuracy:
        return dataclasses.replace(config, localize=False, not_localized="not a compare/golden check")
    if not config.localize:
        return dataclasses.replace(config, not_localized="--no-localize")
    return config


def fixed_inputs(check: SessionCheck, options: ReduceOptions) -> str | None:
    """Why the data step (``reducer_core.data_reduction``) does not run at all, or None: an
    op-present check reads no values (no size changes its verdict); golden reference outputs are
    the full model's (a slice of them is not what a smaller input gives); a command reads the
    inputs of ``--load-inputs``/``--data-loader-script`` itself, at their sizes; a person judging
    each model (interactive) feeds their own inputs."""
    if isinstance(check.check, InteractiveCheck):
        return "a person judges each model with their own inputs"
    if check.spec is not None and check.spec.kind == "op-present":
        return "an op-present check reads no values"
    if check.spec is not None and check.spec.kind == "golden":
        return "a golden check compares with the full-size reference outputs"
    if check.spec is None and (options.load_inputs or options.data_loader_script):
        return "the check reads fixed inputs (--load-inputs / --data-loader-script)"
    return None


def data_config(config: SessionConfig, check: SessionCheck, options: ReduceOptions) -> tuple[SessionConfig, str]:
    """``config`` with what the data step must leave as the user gave it, and a line saying so
    (empty when nothing): the sizes of ``--model-input-shapes`` (``SessionConfig.fixed_sizes``),
    and every input's sizes when the check feeds values of its own (samples of ``--load-inputs``
    or an upload, golden values: ``SessionConfig.fixed_inputs``); the whole step off (``fixed_inputs``)."""
    if not config.reduce_data:
        return config, ""
    if fixed := fixed_inputs(check, options):
        return dataclasses.replace(config, reduce_data=False), f"Input sizes and weights are not reduced: {fixed}."
    sizes = frozenset(d for dims in options.input_shapes.values() for d in dims if isinstance(d, int) and d > 1)
    samples = check.golden is not None
    notes = [f"the sizes of --model-input-shapes ({', '.join(map(str, sorted(sizes)))})"] if sizes else []
    notes += ["the inputs' sizes (the check feeds its samples)"] if samples else []
    note = f"The data step keeps {' and '.join(notes)}." if notes else ""
    return dataclasses.replace(config, fixed_sizes=config.fixed_sizes | sizes, fixed_inputs=samples), note


class SessionHooks(SilentListener):
    """What a driver does for ``ReductionSession.run``: write the candidate where the check reads
    it, run the check, hear each verdict (``on_record``: log it, save the replay or the state),
    and say when to stop. Only the first two have no default."""

    def write_iteration(self, request: CheckRequest) -> Path:
        """Write ``request.candidate``'s model (``ReductionSession.write``) and return its path."""
        raise NotImplementedError

    def run_check(self, request: CheckRequest, model: Path) -> Verdict:
        raise NotImplementedError

    def should_stop(self) -> bool:
        """Polled before each request once the original failed (it may also raise to stop)."""
        return False


class SlotSessionHooks(SessionHooks):
    """The hooks of ``ReductionSession.run_in_slots`` (``engine.parallel.SlotHooks``): ``prepare``
    (main thread) gets a request ready in a slot and returns the work its thread runs (usually
    ``ReductionSession.slot_work``); ``finish`` (main thread) follows that work, before delivery."""

    def prepare(self, request: Request, slot: int) -> SlotWork:
        raise NotImplementedError

    def finish(self, request: Request, slot: int, answer: Answer, output: str) -> None:
        pass


class _Relay:
    """The machine's listener: forwards to whoever listens now (the running hooks)."""

    def __init__(self, target: SessionListener) -> None:
        self.target = target

    def on_record(self, record: IterationRecord) -> None:
        self.target.on_record(record)

    def on_layerwise(self, result: LayerwiseResult) -> None:
        self.target.on_layerwise(result)

    def on_localization(self, localization: Localization) -> None:
        self.target.on_localization(localization)


class ReductionSession:
    def __init__(self, workspace: Workspace, check: SessionCheck, machine: ReductionMachine, relay: _Relay) -> None:
        self.workspace = workspace
        self.check = check
        self.machine = machine
        self._relay = relay
        self.saved_mark: int | None = None  # the cache's mark at the state's last save (jobflow.stored_state)

    @classmethod
    def start(
        cls,
        workspace: Workspace,
        check: SessionCheck,
        config: SessionConfig,
        state: dict[str, Any] | None = None,
        listener: SessionListener | None = None,
    ) -> ReductionSession:
        """A new session, or (``state``) the one whose ``state()`` was saved, at that position."""
        config, note = data_config(resolve_config(config, check.spec), check, workspace.options)
        if note:
            workspace.log.info(note)
        index = workspace.index
        cache = VerdictCache(index.fingerprint, verdict_identity(check, workspace.options))
        relay = _Relay(listener or SilentListener())
        if state:
            machine = ReductionMachine.from_state(index, config, cache, state, relay)
        else:
            machine = ReductionMachine(index, config, cache, relay)
        return cls(workspace, check, machine, relay)

    def listen(self, listener: SessionListener) -> None:
        """Who hears the machine from now on (a driver that keeps the session between calls)."""
        self._relay.target = listener

    # -- the step machine's interface ----------------------------------------------------------

    def next_requests(self, k: int = 1, in_flight: Collection[str] = ()) -> list[Request]:
        """Up to ``k`` requests to start, none in ``in_flight`` (request ids being run)."""
        return self.machine.next_requests(k, in_flight)

    def deliver(self, request: Request, result: Answer, overhead_s: float = 0.0) -> None:
        self.machine.deliver(request, result, overhead_s)

    @property
    def done(self) -> bool:
        return self.machine.done

    @property
    def result(self) -> ReductionResult:
        return self.machine.result

    @property
    def original(self) -> Verdict | None:
        return self.machine.original

    @property
    def cache(self) -> VerdictCache:
        return self.machine.cache

    def state(self, verdicts: bool = True) -> dict[str, Any]:
        return self.machine.state(verdicts)

    def load_replay(self, data: dict[str, Any]) -> int:
        """Verdicts of a debug replay (``--load-debug-replay``): they answer their candidates as
        cached records, before any check runs. Returns how many were loaded."""
        return self.machine.cache.merge_json(data)

    # -- doing the work ----------------------------------------------------------------------------

    def write(self, candidate: Candidate, path: Path) -> list[str]:
        """Write ``candidate``'s model to ``path`` (weights by reference); the weight files it uses."""
        self.workspace.write(candidate, path)
        return self.workspace.weight_locations(candidate)

    def run_layerwise(self, extra_env: Mapping[str, str] | None = None) -> LayerwiseResult:
        """The answer to a ``LayerwiseRequest`` (only asked for with a compare/golden spec)."""
        assert self.check.spec is not None
        return layerwise_run(self.workspace, self.check.spec, self.check.golden, extra_env)

    def execute(self, request: Request, hooks: SessionHooks) -> Answer:
        """Do ``request``'s work with ``hooks``: the answer to deliver."""
        if isinstance(request, LayerwiseRequest):
            return self.run_layerwise()
        try:
            path = hooks.write_iteration(request)
        except MissingTypeError as exc:
            return Verdict(VerdictKind.INFRA_ERROR, "", str(exc))
        return hooks.run_check(request, path)

    def slot_work(
        self,
        request: Request,
        write: Callable[[CheckRequest], Path],
        check: ModelCheck,
        extra_env: Mapping[str, str] | None = None,
    ) -> SlotWork:
        """For a parallel driver: write ``request``'s candidate now (``write`` returns the path) and
        return the work that answers it in a slot's thread (``check`` on that path, or the layerwise
        run with ``extra_env``); a candidate that cannot be written is an infrastructure error,
        answered at once. The layerwise run writes the full model in the slot's thread: nothing
        else runs then (the machine speculates neither during it nor before it)."""
        if isinstance(request, LayerwiseRequest):
            return lambda: (self.run_layerwise(extra_env), "")
        try:
            path = write(request)
        except MissingTypeError as exc:
            verdict = Verdict(VerdictKind.INFRA_ERROR, "", str(exc))
            return lambda: (verdict, verdict.detail)
        return lambda: check.run(path)

    def run(self, hooks: SessionHooks) -> ReductionResult:
        """Run the session to its end (or until ``hooks.should_stop``), one check at a time."""
        return self._run_with(
            hooks, lambda: drive(self.machine, lambda request: self.execute(request, hooks), hooks.should_stop)
        )

    def run_in_slots(self, hooks: SlotSessionHooks, slots: int) -> ReductionResult:
        """Run the session with up to ``slots`` checks at once (``engine.parallel.drive_parallel``)."""
        return self._run_with(hooks, lambda: drive_parallel(self.machine, slots, hooks))

    def _run_with(self, hooks: SessionListener, driver: Callable[[], bool]) -> ReductionResult:
        started = time.monotonic()
        previous, self._relay.target = self._relay.target, hooks
        try:
            stopped = driver()
        finally:
            self._relay.target = previous
        result = self.machine.result
        result.elapsed_s = time.monotonic() - started
        result.stopped_early = stopped
        return result

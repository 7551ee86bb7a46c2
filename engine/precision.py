"""Which nodes must stay fp32: the precision session shared by ``onnx-reducer precision`` and the
service's ``task: precision`` jobs.

It is a ``ReductionSession`` whose machine looks for a pass (``Goal.PASS``) over node sets that
are not subgraphs: a candidate is the set S of nodes kept in fp32, and its model is the *real*
mixed-precision model for S (``checks.fp16_model.to_mixed``: fp16 weights and activations, Casts
only where a tensor crosses between fp16 and fp32, inputs and outputs typed as asked): the file
the check judges is the file that is written. The empty set (the plain fp16 model) is the
original and must fail; the whole set must pass (else the failure is no precision problem); the
strategy then shrinks S while the check passes.

Before the search, one reference run of the fp32 original (``reference_run``, in a child
process) does two things: a compare spec becomes a golden spec against the original's outputs
(a candidate is never compared with its own reference run), and the magnitude of every tensor
gives the search its start (``reducer_core.precision``: the writers and readers of tensors
beyond fp16's range, checked first and minimised from when it passes).

After the search, the answer grows until no fp16 tensor of its file holds inf or NaN where the
fp32 original is finite (``finite_answer``: the mixed model, fp16 storage made real, every
tensor captured beside the original's, in a child; the nodes where a non-finite value starts are
moved to fp32, round after round): an answer whose GELU Div/Erf read inf in fp16 is right only
because erf(inf) = 1, and a fused GPU kernel turns that inf into NaN. ``allow_nonfinite`` keeps
the search's answer and names the tensors that hold inf.

    plan = reference_run(workspace, check, build, folder)    # judged against the fp32 original
    session = PrecisionSession.begin(workspace, plan, mode)
    result = session.run(hooks)                     # result.min_bad: the nodes to keep in fp32
    answer = session.finite_answer(result.min_bad)  # answer.candidate: no inf in an fp16 tensor
    written = session.save_mixed(answer.candidate, path, verify=check)   # judged once more
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import shlex
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from checks.fp16_model import MixedModel, elem_types, to_mixed
from checks.isolated import run_isolated
from checks.mixed_precision import require_fp16_target, without_keep_fp32
from checks.precision_reference import CAPTURE_ENTRY
from checks.precision_reference import ENTRY as REFERENCE_ENTRY
from checks.spec import CheckSpec, ModelCheck
from engine.session import ReductionSession, SessionCheck, SessionHooks, _Relay, resolve_config, verdict_identity
from engine.workspace import Workspace
from reducer_core import modelio
from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.errors import GoalUnreachableError, ReducerError
from reducer_core.graph import GraphIndex
from reducer_core.precision import out_of_range, precision_machine, range_superset
from reducer_core.records import ReductionResult
from reducer_core.requests import Answer, Request, SessionListener, SilentListener
from reducer_core.verdict import Goal, Verdict, VerdictKind

TASK = "precision"
IO_TYPES = ("fp32", "fp16")
NOT_A_PRECISION_PROBLEM = (
    "The failure is not a precision problem: the model fails the check even with every node kept in fp32 "
    "(the target then computes what the reference does). Check the spec's tolerance and inputs, or reduce "
    "the failure with `onnx-reducer reduce`."
)
Build = Callable[[CheckSpec, Path | None], ModelCheck]


MAX_FINITE_ROUNDS = 64


class MixedModelFailedError(ReducerError):
    """The mixed-precision model, written, does not pass the check: nothing is reported as found."""


IO_FP16_ADVICE = (
    " With --io-types fp16 the model's inputs and outputs are fp16 themselves: an output beyond 65,504 "
    "(or an input that needs fp32) cannot pass; keep them fp32 (the default)."
)


@contextlib.contextmanager
def _explained(io: str = "fp32") -> Iterator[None]:
    """The machine's "does not pass even with every node kept", said in precision's terms."""
    try:
        yield
    except GoalUnreachableError as exc:
        advice = IO_FP16_ADVICE if io == "fp16" else ""
        raise GoalUnreachableError(f"{exc} {NOT_A_PRECISION_PROBLEM}{advice}") from None


def precision_config(mode: str) -> SessionConfig:
    """A precision session's options: ``mode`` is the strategy (``reduce``'s modes)."""
    return SessionConfig(mode=mode, goal=Goal.PASS, localize=False, min_good=False)


def name_nodes(workspace: Workspace) -> int:
    """Give every node a unique name (the answer names nodes): an unnamed node, or a later one
    reusing a name, becomes ``<OpType>_<index>``. Returns how many were renamed."""
    model = onnx.ModelProto()
    model.CopyFrom(workspace.index.model)
    renamed = 0
    seen: set[str] = set()
    for i, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = _fresh_name(f"{node.op_type}_{i}", seen)
            renamed += 1
        seen.add(node.name)
    if renamed:
        workspace.index = GraphIndex.build(model, workspace.index.read_weight)
    return renamed


def _fresh_name(base: str, taken: set[str]) -> str:
    name, n = base, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


# --- the fp32 original's reference run ------------------------------------------------------------


@dataclass(frozen=True)
class PrecisionPlan:
    """What the search runs on: ``check`` judges a candidate against the fp32 original (a compare
    spec became a golden spec holding the original's outputs), ``ranges`` the largest magnitude of
    each float tensor in the original's run, ``io`` the type of float graph inputs and outputs."""

    check: SessionCheck
    ranges: Mapping[str, float] = field(default_factory=dict)
    io: str = "fp32"
    reference_detail: str = ""

    def superset(self, index: GraphIndex) -> frozenset[int]:
        return range_superset(index, self.ranges)

    def out_of_range(self) -> list[str]:
        return sorted(out_of_range(self.ranges))


def reference_run(
    workspace: Workspace,
    check: SessionCheck,
    build: Build,
    folder: Path,
    io: str = "fp32",
    extra_env: Mapping[str, str] | None = None,
) -> PrecisionPlan:
    """Run the fp32 original once (isolated, module docstring) and return the plan: the check
    rebuilt (``build(spec, golden)``) to compare with the original's outputs, and the ranges."""
    spec = require_fp16_target(check.spec)
    if io not in IO_TYPES:
        raise ReducerError(f"io types must be one of {', '.join(IO_TYPES)}, not {io!r}.")
    name_nodes(workspace)
    folder.mkdir(parents=True, exist_ok=True)
    golden_out = folder / "precision-reference.golden" if spec.kind == "compare" else None
    ranges_path = folder / "precision-ranges.json"
    with tempfile.TemporaryDirectory(prefix="onnx-reducer-reference-", dir=folder) as tmp:
        original = Path(tmp) / "original.onnx"
        workspace.write(Candidate(workspace.index.all_nodes()), original)
        payload = {
            "entry": REFERENCE_ENTRY,
            "spec": spec.to_json(),
            "model": str(original.resolve()),
            "golden": str(check.golden.resolve()) if check.golden is not None else None,
            "golden_out": str(golden_out.resolve()) if golden_out is not None else None,
            "ranges": str(ranges_path.resolve()),
        }
        verdict, output = run_isolated(payload, spec.timeout, spec.memory_limit, extra_env)
    if verdict.kind is not VerdictKind.PASS and golden_out is None:
        # golden/error specs judge without it: the search starts from every node
        detail = f"the fp32 original's reference run failed ({verdict.kind.value}: {verdict.detail}); no range analysis"
        return PrecisionPlan(dataclasses.replace(check, task=TASK), {}, io, detail)
    if verdict.kind is not VerdictKind.PASS:
        raise GoalUnreachableError(
            f"The fp32 model does not run on the reference ({verdict.kind.value}: {verdict.detail}"
            f"{'; ' + output.strip()[-500:] if output.strip() else ''}). {NOT_A_PRECISION_PROBLEM}"
        )
    ranges = {str(k): float(v) for k, v in json.loads(ranges_path.read_text()).items()}
    identity = f"{workspace.index.fingerprint} {spec.identity} {check.golden_sha256 or ''} io={io}"
    digest = hashlib.sha256(identity.encode()).hexdigest()
    if golden_out is not None:
        judged = dataclasses.replace(spec, kind="golden", reference=None)
        session_check = SessionCheck(build(judged, golden_out), judged, golden_out, f"original:{digest}", TASK)
    else:
        session_check = dataclasses.replace(check, golden_sha256=f"{check.golden_sha256 or ''}/{digest}", task=TASK)
    return PrecisionPlan(session_check, ranges, io, verdict.detail)


# --- the session ------------------------------------------------------------------------------------


class PrecisionSession(ReductionSession):
    """A ``ReductionSession`` over the nodes kept in fp32 (module docstring). ``write`` writes the
    real mixed-precision model of a candidate; ``save_mixed`` writes the answer's and judges it."""

    plan: PrecisionPlan

    @classmethod
    def begin(
        cls,
        workspace: Workspace,
        plan: PrecisionPlan,
        mode: str,
        state: dict[str, Any] | None = None,
        listener: SessionListener | None = None,
    ) -> PrecisionSession:
        """Start (or, with ``state``, resume) the session; the machine tries the plan's range
        superset first (``reducer_core.precision``)."""
        check = plan.check
        require_fp16_target(check.spec)
        renamed = name_nodes(workspace)
        if renamed:
            workspace.log.info(f"Named {renamed} unnamed (or duplicate) node(s) <OpType>_<index> to refer to them.")
        config = resolve_config(precision_config(mode), check.spec)
        index = workspace.index
        cache = VerdictCache(index.fingerprint, verdict_identity(check, workspace.options))
        relay = _Relay(listener or SilentListener())
        machine_class = precision_machine(plan.superset(index))
        if state:
            machine = machine_class.from_state(index, config, cache, state, relay)
        else:
            machine = machine_class(index, config, cache, relay)
        session = cls(workspace, check, machine, relay)
        session.plan = plan
        return session

    def run(self, hooks: SessionHooks) -> ReductionResult:
        with _explained(self.plan.io):
            return super().run(hooks)

    def deliver(self, request: Request, result: Answer, overhead_s: float = 0.0) -> None:
        with _explained(self.plan.io):
            super().deliver(request, result, overhead_s)

    @property
    def everything(self) -> Candidate:
        return Candidate(self.workspace.index.all_nodes())

    def keep_fp32(self, candidate: Candidate) -> list[str]:
        """The names of the candidate's nodes, in the model's (topological) order."""
        nodes = self.workspace.index.nodes
        return [nodes[n].name for n in sorted(candidate.nodes)]

    def _fp32_model(self) -> tuple[onnx.ModelProto, dict[str, int]]:
        """The original with its weights in memory, and its tensors' types (read once)."""
        cached: tuple[onnx.ModelProto, dict[str, int]] | None = getattr(self, "_original", None)
        if cached is None:
            model = self.workspace.model_for(self.everything)
            modelio.inline_external_data(model, self.workspace.sources)
            without_keep_fp32(model)
            cached = (model, elem_types(model))
            self._original = cached
        return cached

    def mixed(self, candidate: Candidate) -> MixedModel:
        """The real mixed-precision model of ``candidate`` and its answer per node and tensor."""
        model, types = self._fp32_model()
        return to_mixed(model, self.keep_fp32(candidate), self.plan.io, types)

    def write(self, candidate: Candidate, path: Path) -> list[str]:
        """The candidate's mixed-precision model, self-contained: the file the check judges."""
        modelio.save_self_contained(
            self.mixed(candidate).model, path, modelio.WeightSources(), self.workspace.options.save
        )
        return []  # self-contained: no weights of the original's referenced

    def save_mixed(self, candidate: Candidate, path: Path, verify: ModelCheck | None = None) -> WrittenMixed:
        """Write the answer's mixed-precision model (the bytes its candidate was judged as) and,
        with ``verify``, judge the written file once more: ``MixedModelFailedError`` unless it passes."""
        mixed = self.mixed(candidate)
        data = modelio.save_self_contained(mixed.model, path, modelio.WeightSources(), self.workspace.options.save)
        verdict = None
        if verify is not None:
            verdict, output = verify.run(path)
            if verdict.kind is not VerdictKind.PASS:
                raise MixedModelFailedError(
                    f"The mixed-precision model written to {path.name} does not pass the check "
                    f"({verdict.kind.value} {verdict.signature}: {verdict.detail}). It is not a result: do not "
                    "deploy it. Re-run with -v to see each check; a check that is not deterministic (a GPU "
                    "target) can make a passing candidate fail once."
                    + (f"\n{output.strip()[-1500:]}" if output.strip() else "")
                )
        return WrittenMixed(mixed, data, verdict)

    def finite_answer(self, candidate: Candidate, allow_nonfinite: bool = False) -> FiniteAnswer:
        """``candidate`` grown until no fp16 tensor of its mixed model holds inf or NaN where the
        fp32 original is finite, on the check's inputs (module docstring): each round captures
        every tensor of the mixed model (fp16 storage made real) and moves to fp32 the nodes where
        a non-finite value starts (a node writing one in fp16 from finite inputs; the readers of
        a Cast to fp16 that overflows), not the nodes it only flows through. With
        ``allow_nonfinite`` nothing moves: the answer names the tensors holding inf."""
        memo: dict[tuple[Candidate, bool], FiniteAnswer] = self.__dict__.setdefault("_finite", {})
        if (candidate, allow_nonfinite) not in memo:
            memo[(candidate, allow_nonfinite)] = self._finite_answer(candidate, allow_nonfinite)
        return memo[(candidate, allow_nonfinite)]

    def _finite_answer(self, candidate: Candidate, allow_nonfinite: bool) -> FiniteAnswer:
        index = self.workspace.index
        by_name = {node.name: n for n, node in enumerate(index.nodes)}
        kept = set(candidate.nodes)
        added: list[str] = []
        nonfinite: dict[str, int] = {}
        rounds = 0
        with tempfile.TemporaryDirectory(prefix="onnx-reducer-finite-", dir=self.workspace.options.work_dir) as tmp:
            original = Path(tmp) / "original.onnx"
            model, _ = self._fp32_model()
            modelio.save_self_contained(model, original, modelio.WeightSources(), self.workspace.options.save)
            while rounds < MAX_FINITE_ROUNDS:
                rounds += 1
                mixed = self.mixed(Candidate(frozenset(kept)))
                bad = self._capture(mixed, original, Path(tmp))
                fp16 = mixed.fp16_names()
                nonfinite = {name: count for name, count in bad.items() if name in fp16}
                if allow_nonfinite or not nonfinite:
                    break
                grow = {by_name[name] for name in _starts(mixed, bad, fp16) if name in by_name} - kept
                if not grow:
                    break  # a graph input typed fp16 (--io-types fp16) holds it: no node can
                kept |= grow
                added += [index.nodes[n].name for n in sorted(grow)]
        return FiniteAnswer(Candidate(frozenset(kept)), candidate, tuple(added), nonfinite, rounds)

    def _capture(self, mixed: MixedModel, original: Path, folder: Path) -> dict[str, int]:
        """The mixed model's float tensors holding inf/NaN where the original's are finite, with
        fp16 storage made real (``checks.precision_reference.capture``, in a child)."""
        spec = self.check.spec
        assert spec is not None
        path = folder / "mixed.onnx"
        out = folder / "nonfinite.json"
        modelio.save_self_contained(mixed.model, path, modelio.WeightSources(), self.workspace.options.save)
        payload = {
            "entry": CAPTURE_ENTRY,
            "spec": spec.to_json(),
            "original": str(original.resolve()),
            "mixed": str(path.resolve()),
            "tensors": {name: source for name, (source, _) in mixed.stored.items()},
            "golden": str(self.check.golden.resolve()) if self.check.golden is not None else None,
            "out": str(out.resolve()),
        }
        verdict, output = run_isolated(payload, spec.timeout, spec.memory_limit)
        if verdict.kind is not VerdictKind.PASS:
            raise MixedModelFailedError(
                f"Cannot run the mixed-precision model to look for inf in its fp16 tensors ({verdict.kind.value}: "
                f"{verdict.detail}). Re-run with --allow-nonfinite to keep the search's answer unchecked for inf."
                + (f"\n{output.strip()[-1500:]}" if output.strip() else "")
            )
        return {str(k): int(v) for k, v in json.loads(out.read_text()).items()}


def _starts(mixed: MixedModel, bad: Mapping[str, int], fp16: Mapping[str, str]) -> set[str]:
    """The nodes (of the original) where a non-finite fp16 value starts: the writer of a bad fp16
    tensor none of whose inputs is bad, or, when that writer is a Cast the converter added (an
    fp32 value beyond fp16's range cast for an fp16 reader), the readers of that tensor. When
    every bad tensor has a bad input (a cycle of nothing: should not happen), all their writers."""
    writers = {out: node for node in mixed.model.graph.node for out in node.output if out}
    readers: dict[str, list[str]] = {}
    for node in mixed.model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node.name)
    casts = set(mixed.cast_nodes)
    starts: set[str] = set()
    fallback: set[str] = set()
    for name in bad:
        if name not in fp16 or name not in writers:
            continue
        writer = writers[name]
        culprits = readers.get(name, []) if writer.name in casts else [writer.name]
        fallback.update(culprits)
        if not any(i in bad for i in writer.input):
            starts.update(culprits)
    return starts or fallback


@dataclass(frozen=True)
class FiniteAnswer:
    """The answer once no fp16 tensor holds inf (``PrecisionSession.finite_answer``): ``candidate``
    the nodes kept fp32, ``searched`` the search's answer, ``added`` the node names moved to fp32
    for it, ``nonfinite`` the fp16 tensors of the answer's file that still hold inf or NaN where the
    fp32 original is finite (``{name in the file: values}``; empty unless allowed or unfixable),
    ``rounds`` the capture runs."""

    candidate: Candidate
    searched: Candidate
    added: tuple[str, ...]
    nonfinite: Mapping[str, int]
    rounds: int

    def to_json(self) -> dict[str, Any]:
        return {
            "added_fp32": list(self.added),
            "searched_fp32": len(self.searched),
            "nonfinite_fp16_tensors": dict(sorted(self.nonfinite.items())),
            "rounds": self.rounds,
        }


@dataclass(frozen=True)
class WrittenMixed:
    """The written answer: its model and answer per node and tensor, its data file (if any) and
    the verdict of the check on the written file (None: not judged again)."""

    mixed: MixedModel
    data: Path | None
    verdict: Verdict | None

    def verified_json(self) -> dict[str, Any]:
        if self.verdict is None:
            return {"checked": False}
        return {"checked": True, "verdict": self.verdict.kind.value, "detail": self.verdict.detail}


# --- the answer in the forms TensorRT users give it -------------------------------------------------


def autocast_patterns(names: Sequence[str]) -> list[str]:
    """ModelOpt AutoCast's ``--nodes_to_exclude`` takes regular expressions of node names: each
    name escaped and anchored, so it matches that node only."""
    return [f"^{re.escape(name)}$" for name in names]


def trtexec_flags(names: Sequence[str], outputs: Mapping[str, int]) -> str:
    """TensorRT 10's ``trtexec`` flags that keep ``names`` in fp32 (layer names default to the
    ONNX node names): each layer computes in fp32 (``--layerPrecisions``) and writes fp32
    (``--layerOutputTypes``, one type per output, ``+`` between), obeyed (``--precisionConstraints``);
    ``outputs``: each node's output count."""
    if not names:
        return "--fp16"
    precisions = ",".join(f"{name}:fp32" for name in names)
    types = ",".join(f"{name}:{'+'.join(['fp32'] * max(1, outputs.get(name, 1)))}" for name in names)
    flags = [f"--layerPrecisions={precisions}", f"--layerOutputTypes={types}", "--precisionConstraints=obey"]
    return " ".join(["--fp16", *(shlex.quote(flag) for flag in flags)])

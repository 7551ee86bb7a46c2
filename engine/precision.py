"""Which nodes must stay fp32: the precision session shared by ``onnx-reducer precision`` and the
service's ``task: precision`` jobs.

It is a ``ReductionSession`` whose machine looks for a pass (``Goal.PASS``) over node sets that
are not subgraphs: a candidate is the set S of nodes kept in fp32, its model is the *whole* model
carrying S (``checks.mixed_precision``), and the user's check spec converts every other node to
fp16. The empty set (the plain fp16 model) is the original and must fail; the whole set must
pass (else the failure is no precision problem); the strategy then shrinks S while the check
passes. Strategies, verdict cache, replays and saved states are the reduction's own.

    session = PrecisionSession.begin(workspace, SessionCheck(check, spec, golden, task="precision"), mode)
    result = session.run(hooks)              # result.min_bad: the nodes to keep in fp32
    session.save_mixed(result.min_bad, path) # the mixed-precision model (onnxconverter-common)
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx

from checks.fp16_warnings import summarised_fp16_warnings
from checks.mixed_precision import keep_fp32_suffix, require_fp16_target, without_keep_fp32
from checks.runtimes.onnxruntime import to_fp16
from engine.session import ReductionSession, SessionCheck, SessionHooks
from engine.workspace import Log, Workspace
from reducer_core import modelio
from reducer_core.candidate import Candidate
from reducer_core.errors import GoalUnreachableError
from reducer_core.graph import GraphIndex
from reducer_core.records import ReductionResult
from reducer_core.session import Answer, Request, SessionConfig, SessionListener
from reducer_core.verdict import Goal

TASK = "precision"
NOT_A_PRECISION_PROBLEM = (
    "The failure is not a precision problem: the model fails the check even with every node kept in fp32 "
    "(the target then computes what the reference does). Check the spec's tolerance and inputs, or reduce "
    "the failure with `onnx-reducer reduce`."
)


@contextlib.contextmanager
def _explained() -> Iterator[None]:
    """The machine's "does not pass even with every node kept", said in precision's terms."""
    try:
        yield
    except GoalUnreachableError as exc:
        raise GoalUnreachableError(f"{exc} {NOT_A_PRECISION_PROBLEM}") from None


def precision_config(mode: str) -> SessionConfig:
    """A precision session's options: ``mode`` is the strategy (``reduce``'s modes)."""
    return SessionConfig(mode=mode, goal=Goal.PASS, localize=False, min_good=False)


def name_nodes(workspace: Workspace) -> int:
    """Give every node a unique name (``keep_fp32`` names nodes): an unnamed node, or a later one
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
        workspace.index = GraphIndex.build(model)
    return renamed


def _fresh_name(base: str, taken: set[str]) -> str:
    name, n = base, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


class PrecisionSession(ReductionSession):
    """A ``ReductionSession`` over the nodes kept in fp32 (module docstring). ``write`` writes the
    whole model naming the candidate's nodes; ``save_mixed`` converts the model for real."""

    @classmethod
    def begin(
        cls,
        workspace: Workspace,
        check: SessionCheck,
        mode: str,
        state: dict[str, Any] | None = None,
        listener: SessionListener | None = None,
    ) -> PrecisionSession:
        """Check the spec, name the nodes and start (or, with ``state``, resume) the session."""
        require_fp16_target(check.spec)
        if check.task != TASK:
            check = dataclasses.replace(check, task=TASK)
        renamed = name_nodes(workspace)
        if renamed:
            workspace.log.info(f"Named {renamed} unnamed (or duplicate) node(s) <OpType>_<index> to refer to them.")
        session = cls.start(workspace, check, precision_config(mode), state, listener)
        assert isinstance(session, PrecisionSession)
        return session

    def run(self, hooks: SessionHooks) -> ReductionResult:
        with _explained():
            return super().run(hooks)

    def deliver(self, request: Request, result: Answer, overhead_s: float = 0.0) -> None:
        with _explained():
            super().deliver(request, result, overhead_s)

    @property
    def everything(self) -> Candidate:
        return Candidate(self.workspace.index.all_nodes())

    def keep_fp32(self, candidate: Candidate) -> list[str]:
        """The names of the candidate's nodes, in the model's (topological) order."""
        nodes = self.workspace.index.nodes
        return [nodes[n].name for n in sorted(candidate.nodes)]

    def write(self, candidate: Candidate, path: Path) -> list[str]:
        """The whole model, naming ``candidate``'s nodes as the ones to keep in fp32."""
        self.workspace.write(self.everything, path, keep_fp32_suffix(self.keep_fp32(candidate)))
        return self.workspace.weight_locations(self.everything)

    def mixed_model(self, candidate: Candidate, log: Log) -> onnx.ModelProto:
        """The model converted to fp16 by onnxconverter-common, ``candidate``'s nodes kept fp32
        (inputs and outputs stay fp32)."""
        model = self.workspace.model_for(self.everything)
        modelio.inline_external_data(model, self.workspace.sources)
        without_keep_fp32(model)
        with summarised_fp16_warnings(log.warning):
            return to_fp16(model, self.keep_fp32(candidate))

    def save_mixed(self, candidate: Candidate, path: Path, log: Log) -> Path | None:
        """Write the mixed-precision model (self-contained); returns its data file, if any."""
        mixed = self.mixed_model(candidate, log)
        return modelio.save_self_contained(mixed, path, modelio.WeightSources(), self.workspace.options.save)

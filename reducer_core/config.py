"""What a reduction session does (``SessionConfig``): the options that decide which checks run,
and their JSON form, which a saved session must match to resume (``reducer_core.state``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from reducer_core.graph import GraphIndex
from reducer_core.strategies import SearchSpace
from reducer_core.verdict import Goal, Pinning


@dataclass(frozen=True)
class SessionConfig:
    """What a session does. ``localize``: run the accuracy flowchart first (compare/golden checks);
    ``not_localized``: why not, when a spec check does not (reported as the localisation's reason);
    ``min_good``: spend up to three checks on a passing model next to the result when none was seen
    (``reducer_core.localization.min_good_probes``).
    ``confirm_flaky`` (on by default): an answer of 2 to ``CONFIRM_LIMIT`` nodes that nothing showed
    inconsistent gets up to ``CONFIRM_LIMIT`` re-checks of the candidates inside it that passed
    once (what made it look minimal: a flaky single culprit whose one-node candidate happened to
    pass ends there). A deterministic check pays those re-checks on such answers only: none on a
    one-node or larger answer. ``Goal.FAILURE`` sessions only.
    ``goal``: ``Goal.PASS`` looks for the smallest node set with which the check passes (the nodes
    kept in fp32 of ``onnx-reducer precision``): the empty set is the original (it must not pass),
    the whole set must pass, and neither localisation nor min-good probes apply."""

    mode: str = "auto"
    reduce_inputs: bool = True
    reduce_outputs: bool = True
    pin_signature: bool | Pinning = True  # True: the default pinning (kind), False: off
    localize: bool = False
    min_good: bool = False
    infra_retries: int = 2
    not_localized: str = field(default="", compare=False)
    confirm_flaky: bool = True
    goal: Goal = Goal.FAILURE
    reduce_bodies: bool = True
    """Reduce inside the bodies of the Loop/If nodes left once the outer graph is minimal
    (``reducer_core.body_reduction``); False keeps them whole, as Polygraphy does."""
    reduce_data: bool = False
    """Shrink the min-bad model's input sizes and weights at the end (``reducer_core.data_reduction``);
    off by default everywhere (``--reduce-data``, the service's ``reduce_data`` job option)."""
    fixed_sizes: frozenset[int] = field(default=frozenset(), compare=False)
    """Sizes the data step never shrinks: those of the shapes the user gave (``--model-input-shapes``).
    Not saved: the verdict cache's identity holds the shapes already."""
    fixed_inputs: bool = field(default=False, compare=False)
    """The check feeds values of its own to every input (samples, golden values): no input size
    shrinks, only the weights' sizes that no input shares. Not saved, as ``fixed_sizes``."""

    @property
    def confirms(self) -> bool:
        """Whether small answers are confirmed (``confirm_flaky`` means nothing to ``Goal.PASS``)."""
        return self.confirm_flaky and self.goal is Goal.FAILURE

    def space(self, index: GraphIndex) -> SearchSpace:
        subgraphs = self.goal is Goal.FAILURE
        return SearchSpace(index, index.all_nodes(), self.reduce_inputs, self.reduce_outputs, subgraphs)

    def to_json(self) -> dict[str, Any]:
        """The fields that decide which checks run (and so must match on resume); ``goal`` only when
        not the default and ``confirm_flaky`` only when on (sessions saved before them, and a
        session saved without confirmation, resume unchanged: ``reducer_core.state.check_state``)."""
        skip = {"infra_retries", "not_localized", "goal", "confirm_flaky", "fixed_sizes", "fixed_inputs"}
        saved = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        if self.confirms:
            saved["confirm_flaky"] = True
        saved["pin_signature"] = _pinning_json(Pinning.of(self.pin_signature))
        if self.goal is not Goal.FAILURE:
            saved["goal"] = self.goal.value
        if "reduce_bodies" in saved and self.reduce_bodies:
            del saved["reduce_bodies"]  # the default: sessions saved before it resume unchanged
        if not self.reduce_data:
            del saved["reduce_data"]  # sessions saved before it existed resume unchanged (``check_state``)
        return saved


def _pinning_json(pinning: Pinning) -> bool | str:
    """``true``/``false`` for the default and off (as sessions saved before ``strict`` existed),
    ``"strict"`` for strict pinning."""
    return pinning.value if pinning is Pinning.STRICT else pinning is Pinning.KIND

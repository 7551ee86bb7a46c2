"""The saved form of a reduction session (``ReductionMachine.state``/``from_state``): its JSON
keys, its format version and the checks a saved session passes before it resumes.

A state is the verdict cache, the layerwise run's result, the counters, the numbers of the
requests in flight and what was checked ahead of the flow; the flow's position is not saved
but rebuilt by replaying the flow against the cache (``reducer_core.machine``). Older states
load too: version 1 (records numbered by the driver), and a state holding only a ``cache`` (what
the service stored before sessions existed)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from reducer_core.config import SessionConfig
from reducer_core.errors import ReplayMismatchError
from reducer_core.graph import GraphIndex
from reducer_core.localization import LayerwiseResult

STATE_FORMAT = "onnx-reducer-session"
STATE_VERSION = 2  # 2: records numbered here (``recorded``), request numbers in flight, farm-seeded verdicts
STATE_VERSIONS = (1, STATE_VERSION)  # 1 still loads: its records go on after the driver's (``numbered``)
NUMBERED_SINCE = 2  # the first version whose records the session numbers itself


@dataclass
class SessionState:
    """One saved session, key by key. ``numbered``: False for a state saved before the session
    numbered its records (``recorded`` unknown: the driver says where they go on). ``flaky`` is
    for readers of the state (the service's job status): a resumed session rebuilds its flakiness
    evidence by replaying the flow, not from here."""

    graph: str
    config: SessionConfig
    cache: dict[str, Any] | None = None
    layerwise: LayerwiseResult | None = None
    checks_run: int = 0
    cache_hits: int = 0
    issued: int = 0
    recorded: int = 0
    in_flight: dict[str, int] = field(default_factory=dict)  # request id -> the number it was handed out with
    farm: Collection[str] = ()
    ahead: Collection[str] = ()
    attempt: int = 0  # infrastructure retries of the step the flow waits at
    flaky: dict[str, Any] | None = None
    numbered: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "graph": self.graph,
            "config": self.config.to_json(),
            "cache": self.cache,
            "layerwise": self.layerwise.to_json() if self.layerwise is not None else None,
            "counters": {
                "checks_run": self.checks_run,
                "cache_hits": self.cache_hits,
                "issued": self.issued,
                "recorded": self.recorded,
            },
            "in_flight": dict(sorted(self.in_flight.items())),
            "farm": sorted(self.farm),
            "ahead": sorted(self.ahead),
            "attempt": self.attempt,
            "flaky": self.flaky,
        }

    @classmethod
    def from_json(cls, state: Mapping[str, Any], index: GraphIndex, config: SessionConfig) -> SessionState:
        """The saved session ``state`` of the model ``index`` made with ``config``; any other
        (another model, other options, not a session) raises ``ReplayMismatchError``."""
        check_state(state, index, config)
        counters = state.get("counters", {})
        return cls(
            graph=index.fingerprint,
            config=config,
            cache=state.get("cache") or None,
            layerwise=LayerwiseResult.from_json(state["layerwise"]) if state.get("layerwise") else None,
            checks_run=int(counters.get("checks_run", 0)),
            cache_hits=int(counters.get("cache_hits", 0)),
            issued=int(counters.get("issued", 0)),
            recorded=int(counters.get("recorded", 0)),
            in_flight={str(k): int(v) for k, v in state.get("in_flight", {}).items()},
            farm=set(state.get("farm", ())),
            ahead=set(state.get("ahead", ())),
            attempt=int(state.get("attempt", 0)),
            flaky=state.get("flaky"),
            numbered=int(state.get("version", STATE_VERSION)) >= NUMBERED_SINCE and "recorded" in counters,
        )


def check_state(state: Mapping[str, Any], index: GraphIndex, config: SessionConfig) -> None:
    """Refuse a ``state`` that is no saved session (or one of an unknown version), or one of
    another model, or one made with options that would run other checks."""
    if state.get("format", STATE_FORMAT) != STATE_FORMAT or state.get("version", STATE_VERSION) not in STATE_VERSIONS:
        raise ReplayMismatchError("This is not a saved onnx-reducer session (or one of another version).")
    if state.get("graph", index.fingerprint) != index.fingerprint:
        raise ReplayMismatchError("The saved session belongs to a different model.")
    saved = state.get("config")
    if saved is not None and "confirm_flaky" not in saved:
        saved = {**saved, "confirm_flaky": True} if config.confirms else saved  # confirming only adds checks at the end
    if saved is not None and "reduce_data" not in saved and config.reduce_data:
        saved = {**saved, "reduce_data": True}  # so does shrinking the inputs: a state saved before it resumes
    if saved is not None and saved != config.to_json():
        raise ReplayMismatchError(f"The saved session was made with other options ({saved}), not {config.to_json()}.")

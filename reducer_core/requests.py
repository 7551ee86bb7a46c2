"""What a reduction session and its driver say to each other: the work it asks for (``CheckRequest``,
``LayerwiseRequest``), the answers a driver delivers (``Answer``), the request ids a driver may
keep instead of the requests (``repeat_of``, ``fingerprint_of``), and what a driver hears as it
happens (``SessionListener``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from reducer_core.candidate import Candidate
from reducer_core.localization import LayerwiseResult
from reducer_core.records import IterationRecord, Localization
from reducer_core.verdict import Verdict


@dataclass(frozen=True)
class CheckRequest:
    """Check ``candidate``. ``attempt`` counts infrastructure-error retries (0 first); ``repeat``
    numbers the runs of a candidate that a flaky check re-checks (0 first, ``reducer_core.flakiness``);
    ``number`` is the iteration number (the driver's ``--iter-info``/artifact name), not part of the id.
    ``speculative``: asked ahead of the flow (a spare slot), not yet needed by it."""

    candidate: Candidate
    phase: str
    attempt: int = 0
    number: int = field(default=0, compare=False)
    repeat: int = 0
    speculative: bool = field(default=False, compare=False)
    kind: ClassVar[str] = "check"

    @property
    def id(self) -> str:
        run = f"r{self.repeat}:" if self.repeat else ""
        return f"check:{self.candidate.fingerprint}:{run}{self.attempt}"


@dataclass(frozen=True)
class LayerwiseRequest:
    """Run the full model once with every tensor marked as an output (``engine.localize``)."""

    kind: ClassVar[str] = "layerwise"

    @property
    def id(self) -> str:
        return "layerwise"


Request = CheckRequest | LayerwiseRequest
Answer = Verdict | LayerwiseResult


def repeat_of(request_id: str) -> int:
    """The repeat index of a check request id (``check:{fingerprint}:r{repeat}:{attempt}``; 0
    for a first run): what a driver that stores only the id needs to rebuild the request."""
    parts = request_id.split(":")
    if len(parts) == 4 and parts[0] == CheckRequest.kind and parts[2].startswith("r"):
        return int(parts[2][1:])
    return 0


def fingerprint_of(request_id: str) -> str:
    """The candidate fingerprint of a check request id (``check:{fingerprint}:[r{repeat}:]{attempt}``)."""
    parts = request_id.split(":")
    return parts[1] if len(parts) >= 3 and parts[0] == CheckRequest.kind else request_id


class SessionListener(Protocol):
    """What a driver hears from the machine, as it happens (never during a replay)."""

    def on_record(self, record: IterationRecord) -> None:
        """Every verdict, cached ones included, in order; a check's record comes after the session
        took it in (its cache and state include it)."""

    def on_layerwise(self, result: LayerwiseResult) -> None:
        """The layerwise run's result was taken in (whole: its per-tensor errors included)."""

    def on_localization(self, localization: Localization) -> None:
        """The flowchart settled: the node it found, or why the strategy reduces instead."""


class SilentListener:
    def on_record(self, record: IterationRecord) -> None:
        pass

    def on_layerwise(self, result: LayerwiseResult) -> None:
        pass

    def on_localization(self, localization: Localization) -> None:
        pass

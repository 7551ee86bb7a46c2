"""The verdict cache: no candidate (same node set, same check) is checked twice in one reduction,
except on purpose: a flaky check's re-checks are runs 1, 2, ... of the candidate, cached apart.

It doubles as the debug replay: saved as JSON after every verdict, loaded to resume a stopped
reduction without re-running the checks that had finished."""

from __future__ import annotations

import json
from typing import Any

from reducer_core.candidate import Candidate
from reducer_core.errors import ReplayMismatchError
from reducer_core.verdict import Verdict, VerdictKind

REPLAY_VERSION = 1


def cache_key(candidate: Candidate, repeat: int = 0) -> str:
    """The first run of a candidate is keyed by its fingerprint alone (as saved replays are); the
    re-checks of a flaky check by ``<fingerprint>~<repeat>``."""
    return candidate.fingerprint if repeat == 0 else f"{candidate.fingerprint}~{repeat}"


class VerdictCache:
    def __init__(self, graph: str, check: str) -> None:
        self.graph = graph
        self.check = check
        self._verdicts: dict[str, Verdict] = {}
        self._changes: list[str] = []  # the keys ``put`` added or changed, in order (``changed_since``)
        self.hits = 0

    def __len__(self) -> int:
        return len(self._verdicts)

    def __contains__(self, candidate: Candidate) -> bool:
        """Whether a verdict is known (not a cache hit: ``get`` counts those)."""
        return candidate.fingerprint in self._verdicts

    def has(self, candidate: Candidate, repeat: int = 0) -> bool:
        """Whether the verdict of run ``repeat`` of ``candidate`` is known."""
        return cache_key(candidate, repeat) in self._verdicts

    def get(self, candidate: Candidate, repeat: int = 0) -> Verdict | None:
        verdict = self._verdicts.get(cache_key(candidate, repeat))
        if verdict is not None:
            self.hits += 1
        return verdict

    def peek(self, candidate: Candidate, repeat: int = 0) -> Verdict | None:
        """The known verdict, not counted as a cache hit (a look ahead, not an answer)."""
        return self._verdicts.get(cache_key(candidate, repeat))

    def put(self, candidate: Candidate, verdict: Verdict, repeat: int = 0) -> None:
        """Remember a verdict about the model; infrastructure errors are not such verdicts.
        ``repeat`` numbers the runs of a candidate a flaky check re-checks (0: the first)."""
        if verdict.kind is VerdictKind.INFRA_ERROR:
            return
        key = cache_key(candidate, repeat)
        if self._verdicts.get(key) != verdict:
            self._verdicts[key] = verdict
            self._changes.append(key)

    @property
    def mark(self) -> int:
        """Where the log of added or changed verdicts stands now (for ``changed_since``)."""
        return len(self._changes)

    def changed_since(self, mark: int) -> dict[str, Any]:
        """The verdicts ``put`` added or changed since ``mark``, as ``to_json`` writes them: what a
        store that keeps the entries apart (the service) writes after each step, whatever the
        cache's size."""
        return {key: self._verdicts[key].to_json() for key in dict.fromkeys(self._changes[mark:])}

    def fingerprints(self) -> set[str]:
        """The keys of the verdicts held (``cache_key``: a re-check's key names its repeat)."""
        return set(self._verdicts)

    def to_json(self, verdicts: bool = True) -> dict[str, Any]:
        """The cache as JSON; without ``verdicts``, its identity only (the entries kept apart)."""
        return {
            "version": REPLAY_VERSION,
            "tool": "onnx-reducer",
            "graph": self.graph,
            "check": self.check,
            "verdicts": {fp: v.to_json() for fp, v in self._verdicts.items()} if verdicts else {},
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True)

    def merge_json(self, data: dict[str, Any]) -> int:
        """Load verdicts saved by an earlier run of the same reduction; returns how many."""
        if data.get("tool") != "onnx-reducer" or data.get("version") != REPLAY_VERSION:
            raise ReplayMismatchError(
                "This is not an onnx-reducer debug replay (Polygraphy's replay files record iteration "
                "names, not node sets, and cannot be resumed here). Start without --load-debug-replay."
            )
        if data.get("graph") != self.graph:
            raise ReplayMismatchError(
                "The debug replay was recorded for a different model (graph fingerprint "
                f"{data.get('graph')} != {self.graph}). Use the replay with the model it was made for."
            )
        if data.get("check") != self.check:
            raise ReplayMismatchError(
                f"The debug replay was recorded with another check ('{data.get('check')}'); its "
                f"verdicts do not apply to '{self.check}'. Start without --load-debug-replay."
            )
        verdicts = data.get("verdicts", {})
        loaded = 0
        for fingerprint, raw in verdicts.items():
            verdict = Verdict.from_json(raw)
            if verdict.kind is not VerdictKind.INFRA_ERROR:
                self._verdicts[fingerprint] = verdict
                loaded += 1
        return loaded

"""A candidate is a set of node indices of the prepared graph, optionally with a *primary* node
whose inputs stay graph inputs while other boundary tensors may be frozen to constants
(Polygraphy's input-side reduction)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True, order=False)
class Candidate:
    nodes: frozenset[int]
    primary: int | None = None

    def __len__(self) -> int:
        return len(self.nodes)

    @cached_property
    def fingerprint(self) -> str:
        """Canonical key: the same node set (and primary node) always has the same fingerprint."""
        digest = hashlib.sha256(",".join(map(str, sorted(self.nodes))).encode())
        if self.primary is not None:
            digest.update(f"|primary={self.primary}".encode())
        return digest.hexdigest()[:24]

    def to_json(self) -> dict[str, object]:
        return {"nodes": sorted(self.nodes), "primary": self.primary}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Candidate:
        nodes = data["nodes"]
        primary = data.get("primary")
        assert isinstance(nodes, list)
        return cls(frozenset(int(n) for n in nodes), int(primary) if isinstance(primary, int) else None)

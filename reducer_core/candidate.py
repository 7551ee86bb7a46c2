"""A candidate is a set of node indices of the prepared graph, optionally with a *primary* node
whose inputs stay graph inputs while other boundary tensors may be frozen to constants
(Polygraphy's input-side reduction), and optionally with edits inside control-flow bodies:
``body`` holds the hierarchical ids of the body nodes removed (``"5/body/12"``: node 12 of the
``body`` of top-level node 5; ``"5/then_branch/3/body/0"`` one level deeper) and ``"5/inline"``
when node 5 is replaced by what is left of its body (``reducer_core.bodies``), and optionally
with data edits: ``data`` holds smaller sizes for its graph inputs' dimensions (``"dim:256=17"``,
``reducer_core.data_edits``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True, order=False)
class Candidate:
    nodes: frozenset[int]
    primary: int | None = None
    body: frozenset[str] = frozenset()
    data: frozenset[str] = frozenset()

    def __len__(self) -> int:
        return len(self.nodes)

    @cached_property
    def fingerprint(self) -> str:
        """Canonical key: the same node set (and primary node) always has the same fingerprint."""
        digest = hashlib.sha256(",".join(map(str, sorted(self.nodes))).encode())
        if self.primary is not None:
            digest.update(f"|primary={self.primary}".encode())
        if self.body:  # a candidate without body edits keeps the fingerprint it always had
            digest.update(("|body=" + ",".join(sorted(self.body))).encode())
        if self.data:  # likewise: data edits extend the key only when present
            digest.update(("|data=" + ",".join(sorted(self.data))).encode())
        return digest.hexdigest()[:24]

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"nodes": sorted(self.nodes), "primary": self.primary}
        if self.body:
            data["body"] = sorted(self.body)
        if self.data:
            data["data"] = sorted(self.data)
        return data

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Candidate:
        nodes = data["nodes"]
        primary = data.get("primary")
        body = data.get("body") or []
        edits = data.get("data") or []
        assert isinstance(nodes, list) and isinstance(body, list) and isinstance(edits, list)
        return cls(
            frozenset(int(n) for n in nodes),
            int(primary) if isinstance(primary, int) else None,
            frozenset(str(b) for b in body),
            frozenset(str(e) for e in edits),
        )

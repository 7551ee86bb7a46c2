"""The outcome of one check, and the rule that decides whether it reproduces the original failure."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class VerdictKind(enum.StrEnum):
    FAIL = "fail"
    PASS = "pass"
    TIMEOUT = "timeout"
    CRASH = "crash"
    INFRA_ERROR = "infra-error"


@dataclass(frozen=True)
class Verdict:
    """``signature`` identifies *how* a check failed (exit code, matched regex, error class...)."""

    kind: VerdictKind
    signature: str = ""
    detail: str = ""
    duration_s: float = 0.0

    @property
    def is_failure(self) -> bool:
        """Whether this verdict, on the original model, is a failure worth reducing."""
        return self.kind in (VerdictKind.FAIL, VerdictKind.CRASH, VerdictKind.TIMEOUT)

    def reproduces(self, original: Verdict, pinned: bool = True) -> bool:
        """True when this verdict counts as the failure being reduced.

        Pinned (the default): only the same kind and signature as the original count, so a
        reduction cannot drift to a different bug. Unpinned: any failure or crash counts (what
        Polygraphy does: any non-zero exit), and a timeout only when the original timed out too.
        Infrastructure errors never count.
        """
        if self.kind is VerdictKind.INFRA_ERROR:
            return False
        if pinned:
            return self.kind is original.kind and self.signature == original.signature
        if self.kind is VerdictKind.TIMEOUT:
            return original.kind is VerdictKind.TIMEOUT
        return self.kind in (VerdictKind.FAIL, VerdictKind.CRASH)

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "signature": self.signature,
            "detail": self.detail,
            "duration_s": round(self.duration_s, 6),
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Verdict:
        return cls(
            kind=VerdictKind(str(data["kind"])),
            signature=str(data.get("signature", "")),
            detail=str(data.get("detail", "")),
            duration_s=float(str(data.get("duration_s", 0.0))),
        )

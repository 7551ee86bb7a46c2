"""The outcome of one check, and the rule that decides whether it reproduces the original failure."""

from __future__ import annotations

import enum
from dataclasses import dataclass

# The signature of a ``crash`` verdict for a check killed for using more memory than its limit
# (``checks.memory``): a limit of ours, not a failure of the model, like a timeout.
MEMORY_LIMIT_SIGNATURE = "memory-limit"
# The signature of a ``crash`` verdict for a runtime that has no implementation of an op of the
# model (a custom domain's op, ``... is not a registered function/op``): a gap of the runtime, not
# the model's failure, so never the original failure unless the user's check asks for it.
OP_NOT_REGISTERED_SIGNATURE = "op-not-registered"


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
        if self.signature == OP_NOT_REGISTERED_SIGNATURE:
            return False
        return self.kind in (VerdictKind.FAIL, VerdictKind.CRASH, VerdictKind.TIMEOUT)

    def reproduces(self, original: Verdict, pinned: bool = True) -> bool:
        """True when this verdict counts as the failure being reduced.

        Pinned (the default): only the same kind and signature as the original count, so a
        reduction cannot drift to a different bug. Unpinned: any failure or crash counts (what
        Polygraphy does: any non-zero exit), and a timeout or a kill at the memory limit only when
        the original ended the same way. Infrastructure errors never count.
        """
        if self.kind is VerdictKind.INFRA_ERROR:
            return False
        if pinned:
            return self.kind is original.kind and self.signature == original.signature
        if self.kind is VerdictKind.TIMEOUT:
            return original.kind is VerdictKind.TIMEOUT
        if self.kind is VerdictKind.CRASH and self.signature == MEMORY_LIMIT_SIGNATURE:
            return original.signature == MEMORY_LIMIT_SIGNATURE
        if self.signature == OP_NOT_REGISTERED_SIGNATURE:
            return False
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

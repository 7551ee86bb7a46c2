"""The outcome of one check, and the rules that decide whether it reproduces the original failure.

Signature pinning has three levels (``Pinning``):

- ``off`` (``--any-failure``): Polygraphy's rule. Any failure or crash counts; a timeout or a kill at
  the memory limit only when the original ended the same way.
- ``kind`` (the default): as ``off``, and the candidate must fail in the same *family* as the
  original (``failure_family``): a crash by signal, a timeout or a memory-limit kill never stands in
  for a failure that exited with a code (or the reverse). Within a family every alternative the user
  listed is the same failure: any ``--fail-regex`` expression, any ``--fail-code``, any exit code,
  any op of an ``op-present`` spec. Compare/golden checks keep ``mismatch:nonfinite`` (an overflow)
  apart from ``mismatch:tolerance`` (precision), and a runtime error apart from both.
- ``strict`` (``--pin-signature strict``): the exact signature: the same matched expression, the same
  exit code, the same signal, the same ops present.
"""

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


class Pinning(enum.StrEnum):
    """How closely a candidate's failure must match the original's to count (module docstring)."""

    OFF = "off"
    KIND = "kind"
    STRICT = "strict"

    @classmethod
    def of(cls, pinned: bool | Pinning) -> Pinning:
        """``True`` is the default (``kind``), ``False`` is ``off``."""
        if isinstance(pinned, Pinning):
            return pinned
        return cls.KIND if pinned else cls.OFF


# Signature prefixes of a command check (``checks.command``): an exit code, a matched --fail-regex,
# or both. Every command failure that exited (or matched) is one family: Polygraphy's meaning.
_COMMAND_PREFIXES = ("exit=", "regex=")
_OP_PRESENT_PREFIX = "op-present:"


class Goal(enum.StrEnum):
    """What a session looks for. ``failure``: the smallest subgraph that still fails the check
    (``reduce``). ``pass``: the smallest set of nodes whose special treatment makes the check pass
    (``precision``: the nodes kept in fp32); its candidates are node sets, not subgraphs, and a
    candidate counts when its verdict is a clean pass."""

    FAILURE = "failure"
    PASS = "pass"


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

    @property
    def family(self) -> str:
        """The part of the signature that the default pinning compares (``failure_family``)."""
        return failure_family(self.kind, self.signature)

    def reproduces(self, original: Verdict, pinned: bool | Pinning = True) -> bool:
        """True when this verdict counts as the failure being reduced, under ``pinned`` (a
        ``Pinning``; ``True`` is the default ``kind``, ``False`` is ``off``: see the module
        docstring). Infrastructure errors never count."""
        if self.kind is VerdictKind.INFRA_ERROR:
            return False
        pinning = Pinning.of(pinned)
        if pinning is Pinning.STRICT:
            return self.kind is original.kind and self.signature == original.signature
        if not self._counts_as_any_failure(original):
            return False
        return pinning is Pinning.OFF or self.family == original.family

    def changed_by_pinning(self, original: Verdict, counted: bool) -> bool:
        """True when this verdict failed, would count without pinning, but was not ``counted``:
        a verdict that signature pinning changed (counted in the summary, shown in the log)."""
        return not counted and self.reproduces(original, Pinning.OFF)

    def _counts_as_any_failure(self, original: Verdict) -> bool:
        """Polygraphy's rule (any non-zero exit), except that a timeout or a kill at the memory
        limit counts only when the original ended the same way: limits of ours, not model bugs."""
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


def failure_family(kind: VerdictKind, signature: str) -> str:
    """What the default pinning compares: the verdict kind plus a coarse class of the signature.

    - a command failure (``exit=N``, ``regex=R``, ``exit=N;regex=R``): ``fail:command``, whatever
      the code or expression (the alternatives the user listed are one failure);
    - ``op-present:...``: ``fail:op-present``, whichever listed ops or names are present;
    - a crash: ``crash:memory-limit`` for a kill at the memory limit, else ``crash`` (any signal, or
      a check process that died without a result);
    - a timeout: ``timeout``;
    - anything else (``mismatch:nonfinite``, ``mismatch:tolerance``, ``error:<Class>``,
      ``error:match=<regex>``, ``interactive``...): the kind and the whole signature.
    """
    if kind is VerdictKind.FAIL and signature.startswith(_COMMAND_PREFIXES):
        return "fail:command"
    if kind is VerdictKind.FAIL and signature.startswith(_OP_PRESENT_PREFIX):
        return "fail:op-present"
    if kind is VerdictKind.CRASH:
        return "crash:memory-limit" if signature == MEMORY_LIMIT_SIGNATURE else "crash"
    if kind is VerdictKind.TIMEOUT:
        return "timeout"
    return f"{kind.value}:{signature}"

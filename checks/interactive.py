"""Interactive mode (no ``--check``): ask the person whether the iteration model passed."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from reducer_core.errors import CheckInfraError
from reducer_core.verdict import Verdict, VerdictKind


@dataclass(frozen=True)
class InteractiveCheck:
    artifact: str

    @property
    def identity(self) -> str:
        return "interactive"

    def run(self, model_path: Path | None = None) -> tuple[Verdict, str]:
        """Ask the person; ``model_path`` is the iteration artifact they inspect (not read here)."""
        started = time.monotonic()
        answer = self._ask(f"Did '{self.artifact}' [p]ass or [f]ail?")
        while answer not in ("p", "f"):
            answer = self._ask("Please choose either: 'p' or 'f':")
        kind = VerdictKind.FAIL if answer == "f" else VerdictKind.PASS
        return Verdict(kind, "interactive" if answer == "f" else "", "answered by user", time.monotonic() - started), ""

    @staticmethod
    def _ask(prompt: str) -> str:
        print(f">>> {prompt} ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            # A ReducerError, so the command line reports it (exit 1) instead of a traceback.
            raise CheckInfraError(
                "Interactive mode needs answers on standard input; none came. Give --check CMD instead, "
                "or resume with --load-debug-replay and the replay saved so far."
            )
        return line.strip().lower()[:1]

"""One log line per iteration, a live progress line on terminals, and the final summary."""

from __future__ import annotations

import sys
from typing import TextIO

from reducer_core.reducer import IterationRecord, ReductionResult


class ProgressReporter:
    def __init__(self, stream: TextIO | None = None, live: bool = True, quiet: bool = False) -> None:
        # Resolved now, not at import: a caller that redirected sys.stderr gets the log there.
        self.stream = stream if stream is not None else sys.stderr
        self.live = live and self.stream.isatty()
        self.quiet = quiet
        self.total_nodes = 0

    def iteration(self, record: IterationRecord) -> None:
        if self.quiet:
            return
        verdict = record.verdict
        source = "cached" if record.cached else f"{verdict.duration_s:.2f}s"
        outcome = "FAIL (reproduces)" if record.reproduces else f"{verdict.kind.value.upper()}"
        if not record.reproduces and verdict.kind.value == "fail":
            outcome = f"FAIL (other signature: {verdict.signature})"
        line = (
            f"[I] iteration {record.number:>4} | {record.phase:<15} | candidate {len(record.candidate):>6} nodes "
            f"| {outcome:<18} | check {source:>8} | best {record.best_size}"
        )
        self._clear()
        print(line, file=self.stream, flush=True)
        if self.live:
            done = 1.0 - record.best_size / self.total_nodes if self.total_nodes else 0.0
            bar = "#" * int(done * 30)
            self.stream.write(f"\r[{bar:<30}] {record.best_size}/{self.total_nodes} nodes left ")
            self.stream.flush()

    def _clear(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[2K")

    def info(self, message: str) -> None:
        if not self.quiet:
            self._clear()
            print(f"[I] {message}", file=self.stream, flush=True)

    def warning(self, message: str) -> None:
        self._clear()
        print(f"[W] {message}", file=self.stream, flush=True)

    def error(self, message: str) -> None:
        self._clear()
        print(f"[E] {message}", file=self.stream, flush=True)

    def summary(self, result: ReductionResult) -> None:
        self._clear()
        for line in summary_lines(result):
            print(f"[I] {line}", file=self.stream, flush=True)


def summary_lines(result: ReductionResult) -> list[str]:
    good = f"{len(result.min_good)} nodes" if result.min_good is not None else "none found"
    return [
        "==== Reduction summary ====",
        f"nodes before: {result.nodes_before}  after: {len(result.min_bad)}  (min-good: {good})",
        f"checks run: {result.checks_run}  cache hits: {result.cache_hits}  iterations: {len(result.iterations)}",
        f"time: {result.elapsed_s:.2f}s total, {result.check_time_s:.2f}s in checks",
        f"original failure: {result.original.kind.value} [{result.original.signature or 'no signature'}]",
    ]

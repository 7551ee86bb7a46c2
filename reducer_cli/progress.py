"""One log line per iteration, a live progress line on terminals, and the final summary."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from reducer_cli.wording import iterations_line
from reducer_core.records import IterationRecord, ReductionResult
from reducer_core.verdict import Goal, Verdict, VerdictKind

QUIET_VERBOSITIES = {"WARNING", "ERROR", "CRITICAL"}


class ProgressReporter:
    """Log lines go to ``stream`` (stderr) and, with ``log_file``, to that file too; ``silent``
    prints nothing; ``timestamps`` prefixes every line with the time (Polygraphy's --log-format)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        live: bool = True,
        quiet: bool = False,
        silent: bool = False,
        timestamps: bool = False,
        log_file: TextIO | None = None,
    ) -> None:
        # Resolved now, not at import: a caller that redirected sys.stderr gets the log there.
        self.stream = stream if stream is not None else sys.stderr
        self.silent = silent
        self.live = live and self.stream.isatty() and not silent
        self.quiet = quiet or silent
        self.timestamps = timestamps
        self.log_file = log_file
        self.total_nodes = 0
        self.original: Verdict | None = None
        self.goal = Goal.FAILURE  # Goal.PASS: `precision`, where a pass is what counts
        # Cached verdicts in a row (they keep the number of the last check run): the first gets its
        # line, the rest are counted into one line said before the next line of any kind.
        self._cached_run: tuple[int, str] | None = None
        self._cached_more: list[IterationRecord] = []

    def _emit(self, line: str) -> None:
        self._flush_cached()
        self._write(line)

    def _flush_cached(self) -> None:
        more, self._cached_more = self._cached_more, []
        if not more:
            return
        sizes = sorted({len(r.candidate) for r in more})
        span = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        counted = sum(r.reproduces for r in more)
        what = "pass" if self.goal is Goal.PASS else "reproduce the failure"
        self._write(
            f"[I] iteration {more[0].number:>4} | {more[0].phase:<15} | {len(more)} more candidates of {span} nodes "
            f"answered from the cache ({counted} {what}) | best {more[-1].best_size}"
        )

    def _write(self, line: str) -> None:
        if self.timestamps:
            line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}"
        if self.log_file is not None:
            print(line, file=self.log_file, flush=True)
        if not self.silent:
            self._clear()
            print(line, file=self.stream, flush=True)

    def iteration(self, record: IterationRecord) -> None:
        if self.quiet:
            return
        verdict = record.verdict
        if record.phase == "original":
            self.original = verdict
        run = (record.number, record.phase) if record.cached else None
        if run is not None and run == self._cached_run:
            self._cached_more.append(record)
            return
        source = "cached" if record.cached else f"{verdict.duration_s:.2f}s"
        self._emit(
            f"[I] iteration {record.number:>4} | {record.phase:<15} | candidate {len(record.candidate):>6} nodes "
            f"| {self._outcome(record):<18} | check {source:>8} | best {record.best_size}"
        )
        self._cached_run = run
        if self.live:
            done = 1.0 - record.best_size / self.total_nodes if self.total_nodes else 0.0
            bar = "#" * int(done * 30)
            self.stream.write(f"\r[{bar:<30}] {record.best_size}/{self.total_nodes} nodes left ")
            self.stream.flush()

    def _outcome(self, record: IterationRecord) -> str:
        """The verdict as the reduction counted it; a failure that signature pinning did not count
        says so, with its signature."""
        verdict = record.verdict
        if self.goal is Goal.PASS:
            return "PASS (passes)" if record.reproduces else verdict.kind.value.upper()
        if record.reproduces:
            return (
                "FAIL (reproduces)"
                if verdict.kind is VerdictKind.FAIL
                else f"{verdict.kind.value.upper()} (reproduces)"
            )
        if self.original is not None and verdict.changed_by_pinning(self.original, record.reproduces):
            what = verdict.signature or verdict.kind.value
            return f"{verdict.kind.value.upper()} (pinned out: {what}, not the original's failure)"
        return verdict.kind.value.upper()

    def _clear(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[2K")

    def info(self, message: str) -> None:
        if not self.quiet:
            self._emit(f"[I] {message}")

    def warning(self, message: str) -> None:
        self._emit(f"[W] {message}")

    def error(self, message: str) -> None:
        self._emit(f"[E] {message}")

    def summary(self, result: ReductionResult) -> None:
        self._flush_cached()
        if not self.quiet:
            for line in summary_lines(result):
                self._emit(f"[I] {line}")


def reporter_from_args(ns: argparse.Namespace, log_file: TextIO | None = None) -> ProgressReporter:
    """-q/-v, and Polygraphy's --silent, --verbosity (the last name decides) and --log-format."""
    verbosity = (ns.verbosity or [""])[-1].rpartition(":")[2].upper()
    return ProgressReporter(
        live=ns.progress,
        quiet=ns.quiet > 0 or verbosity in QUIET_VERBOSITIES,
        silent=ns.silent,
        timestamps="timestamp" in ns.log_format,
        log_file=log_file,
    )


def summary_lines(result: ReductionResult) -> list[str]:
    good = f"{len(result.min_good)} nodes" if result.min_good is not None else "none found"
    return [
        "==== Reduction summary ====",
        f"nodes before: {result.nodes_before}  after: {result.nodes_after}  (min-good: {good})",
        f"checks run: {result.checks_run}  cache hits: {result.cache_hits}  iterations: {len(result.iterations)}  "
        f"pinned out: {result.pinned_out}",
        f"time: {result.elapsed_s:.2f}s total, {result.check_time_s:.2f}s in checks",
        f"original failure: {result.original.kind.value} [{result.original.signature or 'no signature'}]",
        *([result.flakiness.message()] if result.flakiness is not None else []),
        *filter(None, [iterations_line(len(result.iterations), result.checks_run, result.cache_hits)]),
    ]

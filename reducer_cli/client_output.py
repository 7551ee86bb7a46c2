"""What the service commands print: an upload progress bar (terminals only), one line per event, a
job's state, and the ``--json`` summary. Log lines go to stderr; stdout carries the job URL, or the
JSON summary with ``--json``, so scripts can read it."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from reducer_cli.wording import iterations_line
from reducer_client import Event, Job, Problem

BAR_WIDTH = 30
BAR_INTERVAL_S = 0.1


def log(message: str, stream: TextIO | None = None) -> None:
    print(message, file=stream or sys.stderr, flush=True)


class UploadBar:
    """``progress(sent, total)`` for an upload: a bar redrawn in place on a terminal, nothing elsewhere
    or when ``CI`` is set (logs get one line when the upload is done)."""

    def __init__(self, name: str, stream: TextIO | None = None) -> None:
        self.name = name
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() and not os.environ.get("CI")  # CI runners may fake a terminal
        self.drawn_at = 0.0
        self.total = 0

    def __call__(self, sent: int, total: int) -> None:
        self.total = total
        if not self.live:
            return
        now = time.monotonic()
        if sent < total and now - self.drawn_at < BAR_INTERVAL_S:
            return
        self.drawn_at = now
        share = sent / total if total else 1.0
        bar = "#" * int(share * BAR_WIDTH)
        self.stream.write(f"\r[I] uploading {self.name} [{bar:<{BAR_WIDTH}}] {share:4.0%} {_mb(sent)}/{_mb(total)} MB")
        self.stream.flush()

    def done(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[2K")
        log(f"[I] uploaded {self.name} ({_mb(self.total)} MB)", self.stream)


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f}"


def event_line(event: Event) -> str | None:
    """One log line for an event (None for kinds not worth a line)."""
    data = event.data
    if event.kind == "iteration":
        outcome = "FAIL (reproduces)" if data.get("reproduces") else str(data.get("verdict", "?")).upper()
        seconds = float(data.get("duration_s") or 0)
        cost = f"cached ({data['cached']})" if data.get("cached") else f"check {seconds:7.2f}s"
        return (
            f"[I] iteration {data.get('number', '?'):>4} | {data.get('phase', ''):<15} | candidate "
            f"{data.get('nodes', '?'):>6} nodes | {outcome:<18} | {cost:<14} | best {data.get('best_size', '?')}"
        ) + (" | late: after the end, not the answer" if data.get("late") else "")
    if event.kind == "job.queued":
        return "[I] queued" + (" again (retry)" if data.get("retry") else "")
    if event.kind == "job.started":
        return "[I] started" + (f" (attempt {data['attempt']})" if data.get("attempt") else "")
    if event.kind == "job.finishing":
        return "[I] finishing: storing and verifying the answer" + (
            f" (best {data['best_size']} nodes)" if data.get("best_size") is not None else ""
        )
    return None


class EventLog:
    """``on_event`` of ``--wait``: one line per event, except that cached verdicts in a row of one
    iteration and phase (the same number: no check ran) are counted into one line, said before the
    next line (or by ``flush``)."""

    def __init__(self, write: Callable[[str], None] = log) -> None:
        self.write = write
        self.run: tuple[object, object] | None = None
        self.more: list[dict[str, Any]] = []

    def __call__(self, event: Event) -> None:
        data = event.data
        run = (data.get("number"), data.get("phase")) if event.kind == "iteration" and data.get("cached") else None
        if run is not None and run == self.run:
            self.more.append(data)
            return
        line = event_line(event)
        if line is None:
            return
        self.flush()
        self.write(line)
        self.run = run

    def flush(self) -> None:
        more, self.more = self.more, []
        if more:
            sizes = sorted({int(d.get("nodes") or 0) for d in more})
            span = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
            self.write(
                f"[I] iteration {more[0].get('number', '?'):>4} | {more[0].get('phase', ''):<15} | {len(more)} more "
                f"candidates of {span} nodes answered from the cache | best {more[-1].get('best_size', '?')}"
            )


def job_lines(job: Job) -> list[str]:
    """A job's state in a few lines."""
    nodes = f"{job.nodes_before} -> {job.nodes_after}" if job.nodes_after is not None else f"{job.nodes_before}"
    lines = [
        f"job {job.id}: {job.status}",
        f"model: {job.model_filename}  mode: {job.mode}  check: {job.check_kind}  nodes: {nodes}",
        f"checks run: {job.progress.checks_run}  cache hits: {job.progress.cache_hits} "
        f"(farm: {job.progress.farm_cache_hits})  best size: {job.progress.best_size}  attempts: {job.attempts}",
    ]
    differ = iterations_line(job.progress.iteration, job.progress.checks_run, job.progress.cache_hits)
    if differ is not None and job.progress.iteration:
        lines.append(differ)
    if job.progress.eta_s is not None:
        lines.append(f"estimated time left: {job.progress.eta_s:.0f}s")
    flaky = job.flaky
    if flaky is not None and flaky.get("status") == "flaky":
        lines.append(f"flaky: fails ~{flaky.get('fails_percent')} % of runs ({flaky.get('rechecks')} re-checks)")
    if job.keep_fp32 is not None:
        lines.append(f"must stay fp32: {', '.join(job.keep_fp32) or 'none (the fp16 model passes)'}")
    if job.passes is not None and job.passes.get("done"):
        lines.append(f"optimizers: {job.passes.get('message', '')}")
    if job.releases is not None and job.releases.get("done"):
        lines.append(f"releases: {job.releases.get('message', '')}")
    if job.verified is not None:
        lines.append("verified: " + verified_line(job.verified))
    if job.suspect is not None:
        lines.append(f"SUSPECT: {job.suspect.get('message', '')}")
        lines.append(f"the original's failure output: {str(job.suspect.get('output', '')).strip()[-800:]}")
    if job.error is not None:
        lines.append(f"error: {job.error.code}: {job.error.message or ''}".rstrip(": "))
    return lines


def verified_line(verified: dict[str, Any]) -> str:
    """``min-bad judged, min-good rechecked (pass)``: how each final model was verified."""
    parts = []
    for key, name in (("min_bad", "min-bad"), ("min_good", "min-good")):
        entry = verified.get(key)
        if isinstance(entry, dict):
            verdict = f" ({entry['verdict']})" if entry.get("verdict") else ""
            parts.append(f"{name} {entry.get('status')}{verdict}")
    return ", ".join(parts) or "nothing"


@dataclass
class Summary:
    """The machine-readable result of a command (``--json``)."""

    exit_code: int = 0
    job_id: str | None = None
    url: str | None = None
    api_url: str | None = None
    status: str | None = None
    replayed: bool | None = None
    error: dict[str, Any] | None = None
    nodes_before: int | None = None
    nodes_after: int | None = None
    checks_run: int | None = None
    keep_fp32: list[str] | None = None  # a precision job's answer
    passes: dict[str, Any] | None = None  # a bisect-passes job's answer
    releases: dict[str, Any] | None = None  # a bisect-releases job's answer
    verified: dict[str, Any] | None = None  # how each final model was verified (GET /v1/jobs/{id})
    suspect: dict[str, Any] | None = None  # the check fails whatever the model
    cache_hits: int | None = None
    farm_cache_hits: int | None = None
    files: list[str] = field(default_factory=list)
    jobs: list[dict[str, Any]] | None = None  # `onnx-reducer jobs` only

    def with_job(self, job: Job) -> Summary:
        self.job_id, self.status = job.id, job.status
        self.nodes_before, self.nodes_after = job.nodes_before, job.nodes_after
        self.checks_run = job.progress.checks_run
        self.keep_fp32 = job.keep_fp32
        self.passes = job.passes
        self.releases = job.releases
        self.verified, self.suspect = job.verified, job.suspect
        self.cache_hits, self.farm_cache_hits = job.progress.cache_hits, job.progress.farm_cache_hits
        if job.error is not None:
            self.error = {"code": job.error.code, "message": job.error.message}
        return self

    def with_problem(self, problem: Problem) -> Summary:
        self.error = {"status": problem.status, "type": problem.type, "title": problem.title, "detail": problem.detail}
        return self

    def with_message(self, code: str, message: str) -> Summary:
        self.error = {"code": code, "message": message}
        return self

    def add_file(self, path: Path) -> None:
        self.files.append(str(path))

    def dump(self) -> str:
        fields = {k: v for k, v in self.__dict__.items() if k != "jobs" or v is not None}
        return json.dumps(fields, indent=2)

"""Bounded capture of a check process's output, with ``--fail-regex`` matched as it streams.

A check may print without limit (a verbose TensorRT build, a runaway loop); keeping all of it in
memory could exhaust a worker. The pipes are read incrementally (``selectors``, 64 KiB at a time)
and each stream keeps only its first ``HEAD_CHARS`` and last ``TAIL_CHARS`` characters (the middle
is replaced by a note saying how much was left out): at most 1 MiB per check for both streams.

Regexes are searched over the *whole* output, as Polygraphy does on ``stdout + stderr``, without
keeping it: each stream is scanned with a sliding window (the last ``REGEX_OVERLAP_CHARS`` = 64 Ki
characters of what came before, plus the new text), and at the end the junction of the two
streams (end of stdout + start of stderr) is scanned too. So a match up to 64 Ki characters long
is found wherever it lies, also across a read boundary or the stdout/stderr junction; a single
match longer than that may be missed (document: keep fail regexes local, e.g. one line).

Anchors and look-arounds keep their meaning: a window is searched from the position where its
new text may start a match (``Pattern.search(window, pos)``: ``^``/``\\A``/``\\b`` and look-behinds
see the real preceding character), and a match that touches the end of a window is only taken
once more text follows it or the stream has ended (so ``$``, ``\\b`` and look-aheads are judged
with the real next character). stderr is scanned as if stdout ended with a newline; the junction
scan judges its first characters with stdout's real end.

Patterns are ``regex`` patterns (the ``re`` syntax) matched with a time limit: the check's own
deadline (at least ``MIN_REGEX_S`` for the final scans), so a pattern that backtracks
catastrophically ends as a ``timeout`` verdict instead of holding the worker for ever."""

from __future__ import annotations

import codecs
import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Protocol

import regex

from checks import cancel
from checks.memory import MEMORY_LIMIT_SIGNATURE, MemoryWatch, kill_check_processes
from reducer_core.verdict import Verdict, VerdictKind

READ_BYTES = 64 * 1024
HEAD_CHARS = 256 * 1024
TAIL_CHARS = 256 * 1024
REGEX_OVERLAP_CHARS = 64 * 1024
MIN_REGEX_S = 1.0  # each search gets at least this long, also after the check's deadline


class RegexScanner:
    """Which of ``patterns`` match the text fed so far (see the module doc for the window rule)."""

    def __init__(
        self,
        patterns: Sequence[regex.Pattern[str]],
        overlap: int = REGEX_OVERLAP_CHARS,
        context: str = "",
        carry: str = "",
        deadline: float | None = None,
    ) -> None:
        self.patterns = list(patterns)
        self.hits = [False] * len(self.patterns)
        self.overlap = overlap
        self.deadline = deadline  # time.monotonic() after which a search raises TimeoutError
        self._context = context  # the one character before ``_carry`` ("" at the real start)
        self._carry = carry  # the last ``overlap`` characters, searched again with the next text

    def feed(self, text: str, final: bool = False) -> None:
        body = self._carry + text
        if not all(self.hits):
            window = self._context + body
            start = len(self._context)
            for i, pattern in enumerate(self.patterns):
                if not self.hits[i]:
                    self.hits[i] = self._search(pattern, window, start, final, self._time_left())
        if len(body) > self.overlap:
            self._context = body[-self.overlap - 1]
            self._carry = body[-self.overlap :]
        else:
            self._carry = body

    def _time_left(self) -> float | None:
        return None if self.deadline is None else max(self.deadline - time.monotonic(), MIN_REGEX_S)

    @staticmethod
    def _search(pattern: regex.Pattern[str], window: str, start: int, final: bool, timeout: float | None) -> bool:
        # Ending at the last character (or just before a trailing newline, for '$'), a match may
        # depend on what comes next: take it only when nothing will.
        matches = pattern.finditer(window, start, timeout=timeout)
        return any(final or match.end() < len(window) - 1 for match in matches)

    @property
    def context(self) -> str:
        return self._context

    @property
    def carry(self) -> str:
        return self._carry


class BoundedText:
    """The first ``head`` and last ``tail`` characters of a text fed piece by piece."""

    def __init__(self, head: int = HEAD_CHARS, tail: int = TAIL_CHARS) -> None:
        self.head_limit, self.tail_limit = head, tail
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self.total = 0

    def add(self, text: str) -> None:
        self.total += len(text)
        room = self.head_limit - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if not text:
            return
        self._tail.append(text)
        self._tail_len += len(text)
        while self._tail_len - len(self._tail[0]) >= self.tail_limit:
            self._tail_len -= len(self._tail.popleft())
        if self._tail_len > self.tail_limit:
            cut = self._tail_len - self.tail_limit
            self._tail[0] = self._tail[0][cut:]
            self._tail_len -= cut

    def text(self) -> str:
        omitted = self.total - self._head_len - self._tail_len
        middle = f"\n[... {omitted} characters of output left out ...]\n" if omitted else ""
        return "".join(self._head) + middle + "".join(self._tail)


class StreamCapture:
    """One output stream: decoded incrementally (UTF-8, invalid bytes replaced), kept bounded,
    scanned for ``patterns``; its first ``REGEX_OVERLAP_CHARS`` are kept for the junction scan."""

    def __init__(
        self,
        patterns: Sequence[regex.Pattern[str]] = (),
        context: str = "",
        overlap: int = REGEX_OVERLAP_CHARS,
        kept: BoundedText | None = None,
    ) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.kept = kept if kept is not None else BoundedText()
        self.scanner = RegexScanner(patterns, overlap, context=context)
        self.start = ""

    def feed(self, data: bytes) -> None:
        self._add(self._decoder.decode(data))

    def _add(self, text: str) -> None:
        if not text:
            return
        self.kept.add(text)
        if len(self.start) < self.scanner.overlap:
            self.start += text[: self.scanner.overlap - len(self.start)]
        self.scanner.feed(text)

    def close(self) -> None:
        """Flush the decoder (the scan's final pass is ``finish_scans``'s: it knows what follows)."""
        self._add(self._decoder.decode(b"", final=True))

    def text(self) -> str:
        return self.kept.text()


def matched_patterns(
    patterns: Sequence[regex.Pattern[str]], stdout: StreamCapture, stderr: StreamCapture | None
) -> list[str]:
    """The patterns (in order) that match ``stdout + stderr``, after both streams were closed.
    Raises ``TimeoutError`` when a pattern runs past the scanners' deadline."""
    if stderr is None or stderr.kept.total == 0:
        stdout.scanner.feed("", final=True)
        hits = list(stdout.scanner.hits)
    else:  # stdout's end is not the output's end: the junction scan judges it
        stderr.scanner.feed("", final=True)
        junction = RegexScanner(
            patterns,
            stdout.scanner.overlap,
            context=stdout.scanner.context,
            carry=stdout.scanner.carry,
            deadline=stdout.scanner.deadline,
        )
        junction.feed(stderr.start, final=len(stderr.start) == stderr.kept.total)
        hits = [a or b or c for a, b, c in zip(stdout.scanner.hits, stderr.scanner.hits, junction.hits, strict=True)]
    return [p.pattern for p, hit in zip(patterns, hits, strict=True) if hit]


@dataclass(frozen=True)
class Stopped:
    """Why ``pump`` stopped waiting before the check finished: its time or memory limit."""

    verdict_kind: VerdictKind
    signature: str
    detail: str

    def verdict(self, duration_s: float) -> Verdict:
        return Verdict(self.verdict_kind, self.signature, self.detail, duration_s)


REGEX_TIMED_OUT = Stopped(
    VerdictKind.TIMEOUT, "timeout", "matching a fail regex against the output ran past the check's time limit"
)


class CheckProcess(Protocol):
    """What ``pump`` needs of a check's process: a ``subprocess.Popen``, or a check forked by a
    warm runner (``checks.warm``), whose exit status comes from the runner."""

    @property
    def pid(self) -> int: ...

    def wait(self, timeout: float | None = None) -> int: ...


def pump(
    proc: CheckProcess,
    streams: Sequence[tuple[IO[bytes], StreamCapture]],
    timeout_s: float | None,
    memory_limit_bytes: int | None = None,
) -> Stopped | None:
    """Read ``streams`` until they close and ``proc`` exits; None when it did, else why not:
    ``timeout_s`` ran out (the caller kills the process group, then calls ``pump`` again briefly
    for what is left), or the resident memory of the check's processes went above
    ``memory_limit_bytes`` (``checks.memory``; those processes are killed here already). Inside
    a stop scope (``checks.cancel``) that asks to stop, the check's processes are killed and
    ``CheckStoppedError`` is raised."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    watch = MemoryWatch.create(proc.pid, memory_limit_bytes)
    timed_out = Stopped(VerdictKind.TIMEOUT, "timeout", f"timed out after {timeout_s or 0:g}s")
    for _, capture in streams:
        if capture.scanner.deadline is None:
            capture.scanner.deadline = deadline

    def wait_s() -> float | None:
        """How long to block: until the deadline, the next memory sample or the next poll of the
        stop scope (``checks.cancel``), None for ever."""
        waits = [] if deadline is None else [max(0.0, deadline - time.monotonic())]
        waits += [] if watch is None else [watch.due_in()]
        waits += [cancel.POLL_S] if cancel.active() else []
        return min(waits, default=None)

    def stop_if_asked() -> None:
        if cancel.stop_requested():
            kill_check_processes(proc.pid)
            raise cancel.CheckStoppedError()

    def over_memory() -> Stopped | None:
        if watch is None or not watch.over_limit():
            return None
        watch.kill()
        return Stopped(VerdictKind.CRASH, MEMORY_LIMIT_SIGNATURE, watch.detail)

    with selectors.DefaultSelector() as selector:
        for pipe, capture in streams:
            if not pipe.closed:
                selector.register(pipe, selectors.EVENT_READ, capture)
        while selector.get_map():
            stop_if_asked()
            if (stopped := over_memory()) is not None:
                return stopped
            if deadline is not None and deadline <= time.monotonic():
                return timed_out
            for key, _ in selector.select(wait_s()):
                data = os.read(key.fd, READ_BYTES)
                if data:
                    try:
                        key.data.feed(data)
                    except TimeoutError:
                        return REGEX_TIMED_OUT
                else:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()  # type: ignore[union-attr]
    try:
        for _, capture in streams:
            capture.close()
    except TimeoutError:
        return REGEX_TIMED_OUT
    while True:  # the pipes closed; the process may still run (it closed them, or a child holds none)
        stop_if_asked()
        if (stopped := over_memory()) is not None:
            return stopped
        try:
            proc.wait(wait_s())
            return None
        except subprocess.TimeoutExpired:
            if deadline is not None and deadline <= time.monotonic():
                return timed_out


def signal_name(number: int) -> str:
    """SIGSEGV for 11; the number itself for signals Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def kill_group(proc: CheckProcess) -> None:
    """SIGKILL the process group a check was started in (``start_new_session=True``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)

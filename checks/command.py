"""The external-command check of Polygraphy's ``--check``: run a command on the iteration model;
a non-zero exit code (minus ignored codes, or only listed fail codes) or a matching regex fails.

The command runs in its own process group with a time limit; on timeout the whole group is
killed, and the verdict is ``timeout``. Above ``memory_limit_bytes`` of resident memory (the
command and every process it started, ``checks.memory``) all of them are killed, and the verdict
is ``crash`` with signature ``memory-limit``. A death by signal is a ``crash``. ``env`` is the command's
whole environment: ``None`` passes this process's on (the command line's ``--check``, the user's
own command, as in Polygraphy); spec checks pass ``checks.isolated.safe_child_env()``."""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import regex

from checks.capture import REGEX_TIMED_OUT, StreamCapture, kill_group, matched_patterns, pump, signal_name
from checks.lifeline import die_with_parent
from reducer_core.data_reduction import INPUT_SIZE_REFUSED
from reducer_core.verdict import Verdict, VerdictKind

OUTPUT_TAIL_CHARS = 4000
# A runtime refusing an input's size (onnxruntime, Polygraphy's runners): a command that feeds
# inputs of its own sizes to a model whose sizes shrank (``reducer_core.data_reduction``).
_INPUT_SIZE_REFUSAL = regex.compile(
    r"Got invalid dimensions for input|Invalid rank for input|Received incompatible shape"
)
KILL_GRACE_S = 5.0  # after a timeout kill, how long to read what the pipes still hold


@dataclass(frozen=True)
class CommandCheck:
    command: Sequence[str]
    fail_codes: Sequence[int] = ()
    ignore_fail_codes: Sequence[int] = ()
    fail_regexes: Sequence[str] = ()
    timeout_s: float | None = None
    memory_limit_bytes: int | None = None  # resident memory of all its processes (``checks.memory``)
    env: Mapping[str, str] | None = None  # None: this process's whole environment (``--check``)
    cwd: Path | None = None  # None: this process's working directory
    compiled: list[regex.Pattern[str]] = field(default_factory=list, compare=False)

    def __post_init__(self) -> None:
        self.compiled.extend(regex.compile(r) for r in self.fail_regexes)

    @property
    def identity(self) -> str:
        parts = [shlex.join(self.command)]
        parts += [f"fail-code={c}" for c in self.fail_codes]
        parts += [f"ignore-fail-code={c}" for c in self.ignore_fail_codes]
        parts += [f"fail-regex={r}" for r in self.fail_regexes]
        if self.memory_limit_bytes is not None:
            parts.append(f"memory-limit={self.memory_limit_bytes}")
        return " ".join(parts)

    def run(self, model_path: Path | None = None) -> tuple[Verdict, str]:
        """Run the command once; returns the verdict and the combined output. The command reads
        the iteration model itself, so ``model_path`` is not used (the ModelCheck signature)."""
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                list(self.command),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env,
                cwd=self.cwd,
                preexec_fn=die_with_parent(),  # noqa: PLW1509 - prctl only, resolved before the fork
            )
        except OSError as exc:
            return Verdict(VerdictKind.INFRA_ERROR, "", f"cannot start check: {exc}"), str(exc)
        stdout = StreamCapture(self.compiled)
        stderr = StreamCapture(self.compiled, context="\n")
        assert proc.stdout is not None and proc.stderr is not None
        streams = [(proc.stdout, stdout), (proc.stderr, stderr)]
        with proc:
            stopped = pump(proc, streams, self.timeout_s, self.memory_limit_bytes)
            if stopped is not None:
                kill_group(proc)
                pump(proc, streams, KILL_GRACE_S)
        duration = time.monotonic() - started
        text = stdout.text() + stderr.text()
        if stopped is not None:
            return stopped.verdict(duration), text
        try:
            matched = matched_patterns(self.compiled, stdout, stderr)
        except TimeoutError:
            return REGEX_TIMED_OUT.verdict(duration), text
        return self.judge(proc.returncode, text, duration, matched), text

    def judge(self, code: int, output: str, duration: float, matched: Sequence[str] | None = None) -> Verdict:
        """Polygraphy's rule: ignored codes pass; with --fail-code only those codes fail (and
        also need a regex match when regexes are given); otherwise a regex match fails (even with
        exit 0) or, without regexes, any non-zero exit fails. A death by signal that neither
        fail codes nor regexes decide is a ``crash``. ``matched``: the regexes that matched the
        whole output while it streamed (``run``); None searches ``output`` itself."""
        if matched is None:
            matched = [r.pattern for r in self.compiled if r.search(output)]
        if code in self.ignore_fail_codes:
            failed = False
        elif self.fail_codes:
            failed = code in self.fail_codes and (bool(matched) or not self.compiled)
        elif code < 0 and not self.compiled:
            return Verdict(
                VerdictKind.CRASH,
                f"signal={signal_name(-code)}",
                f"killed by {signal_name(-code)}",
                duration,
            )
        else:
            failed = bool(matched) if self.compiled else code != 0
        if failed:
            signature = _signature(code, matched[0] if matched else None, bool(self.fail_codes))
            if not matched and _INPUT_SIZE_REFUSAL.search(output):  # no expression of the user's decided it
                signature += f";{INPUT_SIZE_REFUSED}"  # the same family; a data step does not count it
            return Verdict(VerdictKind.FAIL, signature, f"exit code {code}", duration)
        return Verdict(VerdictKind.PASS, "", f"exit code {code}", duration)


def _signature(code: int, regex: str | None, codes_pinned: bool) -> str:
    """How a command failed: the first listed --fail-regex that matched, with the exit code only
    when --fail-code chose the codes too; without regexes, the exit code. All of these are one
    failure family (``reducer_core.verdict.failure_family``): the default pinning counts any of
    them, as Polygraphy does; only ``--pin-signature strict`` compares the signature itself."""
    if regex is None:
        return f"exit={code}"
    return f"exit={code};regex={regex}" if codes_pinned else f"regex={regex}"


def tail(text: str, chars: int = OUTPUT_TAIL_CHARS) -> str:
    return text if len(text) <= chars else "…" + text[-chars:]

"""Check output is read as it streams and kept bounded; --fail-regex still sees all of it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
import regex

from checks.capture import BoundedText, RegexScanner, StreamCapture, matched_patterns
from checks.command import CommandCheck
from reducer_core.verdict import VerdictKind
from tests.checks.conftest import ROOT

PATTERNS = [
    r"FAILED",
    r"^start",
    r"^line",
    r"(?m)^line 3$",
    r"end$",
    r"\Aline",
    r"3\nline 4",
    r"line \d+\nline",
    r"(?<=x)FAILED",
    r"FAILED(?=!)",
    r"\bine\b",
    r"ne 7\Z",
    r"$",
    r"",
    r"nowhere",
]
TEXTS = [
    "start: line 1\nline 2\nline 3\nline 4 FAILED!\nthe end",
    "line 1\nxFAILED\nline 3\nline 4\nline 5\nline 6\nline 7",
    "",
    "end\n",
    "a FAILED b",
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8, 1000])
def test_streamed_matching_agrees_with_a_search_over_the_whole_text(text: str, chunk: int) -> None:
    """Every match here is shorter than the overlap (16), wherever the chunks split it."""
    patterns = [regex.compile(p) for p in PATTERNS]
    scanner = RegexScanner(patterns, overlap=16)
    for i in range(0, len(text), chunk):
        scanner.feed(text[i : i + chunk])
    scanner.feed("", final=True)
    found = [p.pattern for p, hit in zip(patterns, scanner.hits, strict=True) if hit]
    assert found == [p.pattern for p in patterns if p.search(text)]


@pytest.mark.parametrize("split", [0, 1, 5, 12, 20, 31, 40, 47, 49, 50])
@pytest.mark.parametrize("chunk", [1, 4, 64])
def test_matching_spans_the_stdout_stderr_junction_as_polygraphy_concatenates_them(split: int, chunk: int) -> None:
    text = "start: line 1\nline 2\nline 3 FAILED!\nline 4\nthe end"
    assert len(text) == 50
    patterns = [regex.compile(p) for p in PATTERNS]
    out = StreamCapture(patterns, overlap=16)
    err = StreamCapture(patterns, context="\n", overlap=16)
    for capture, part in ((out, text[:split]), (err, text[split:])):
        data = part.encode()
        for i in range(0, len(data), chunk):
            capture.feed(data[i : i + chunk])
        capture.close()
    assert out.text() + err.text() == text
    assert matched_patterns(patterns, out, err) == [p.pattern for p in patterns if p.search(text)]


def test_a_multibyte_character_split_across_reads_is_decoded() -> None:
    capture = StreamCapture([regex.compile("é!")])
    data = "café!".encode()
    capture.feed(data[:4])
    capture.feed(data[4:])
    capture.close()
    assert capture.text() == "café!"
    assert matched_patterns(capture.scanner.patterns, capture, None) == ["é!"]


def test_bounded_text_keeps_the_head_and_the_tail() -> None:
    kept = BoundedText(head=10, tail=10)
    for i in range(1000):
        kept.add(f"{i:04d}")
    assert kept.total == 4000
    text = kept.text()
    assert text.startswith("0000000100\n") and text.endswith("\n9709980999")
    assert "3980 characters of output left out" in text
    assert len(text) < 100


CHATTY = textwrap.dedent(
    """
    import json, sys
    from checks.command import CommandCheck
    from checks.isolated import run_isolated

    script = (
        "import sys\\n"
        "line = b'x' * 1023 + b'\\\\n'\\n"
        "for _ in range(200 * 1024): sys.stdout.buffer.write(line)\\n"
        "sys.stdout.buffer.write(b'FATAL: the very last line\\\\n')\\n"
        "sys.stderr.write('done\\\\n')\\n"
    )
    regex = r"(?m)^FATAL: the very last line$"
    check = CommandCheck([sys.executable, "-c", script], fail_regexes=[regex], timeout_s=120)
    verdict, output = check.run()
    isolated, isolated_output = run_isolated({"entry": "tests.checks.helpers:chatty", "megabytes": 200}, 120)
    print(json.dumps({
        "kind": verdict.kind.value, "signature": verdict.signature, "output": len(output),
        "tail": output[-40:], "isolated": isolated.kind.value, "isolated_output": len(isolated_output),
        "isolated_tail": isolated_output[-40:],
        # VmHWM is this address space's peak; ru_maxrss would include the parent's (pytest's)
        # peak from before exec on Linux.
        "maxrss_mb": int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024,
    }))
    """
)


def test_a_check_printing_200_mb_is_matched_at_its_end_with_bounded_memory() -> None:
    """In a fresh interpreter so that its peak memory is this capture's alone."""
    proc = subprocess.run(
        [sys.executable, "-c", CHATTY], cwd=ROOT, capture_output=True, text=True, check=True, timeout=300
    )
    result = json.loads(proc.stdout)
    assert result["kind"] == "fail"
    assert result["signature"] == "regex=(?m)^FATAL: the very last line$"
    assert result["tail"].endswith("FATAL: the very last line\ndone\n")
    assert result["output"] < 1_100_000
    assert result["isolated"] == "pass"
    assert result["isolated_output"] < 1_100_000
    assert result["isolated_tail"].endswith("the very last line")
    # This interpreter's own peak is ~50 MB; keeping the output whole costs 400+ MB (bytes + text).
    assert result["maxrss_mb"] < 150, result


def test_a_catastrophically_backtracking_fail_regex_ends_as_a_timeout() -> None:
    script = "print('a' * 40 + '!')"
    check = CommandCheck([sys.executable, "-c", script], fail_regexes=[r"(a|aa)+$"], timeout_s=2)
    started = time.monotonic()
    verdict, _ = check.run()
    assert verdict.kind is VerdictKind.TIMEOUT
    assert "fail regex" in verdict.detail
    assert time.monotonic() - started < 30

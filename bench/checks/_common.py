"""Shared by the planted-failure check scripts (imported from the script's own folder).

- ``graph_nodes(path)`` reads only the top-level node names and op types straight from the
  protobuf wire format through ``mmap``: no onnx import, and an iteration model with 1 GB of
  inline weights (Polygraphy writes those) costs no more to inspect than one without.
- ``finish(...)`` appends one JSON line to the file named by ``$BENCH_CHECK_LOG`` (one line per
  check run, identical for both reducers), prints ``BENCH-FAIL`` when the model fails and exits 1.
  The check's duration runs from the *process start* (read from /proc, so interpreter start-up
  counts as check time for both tools) to the log write. With ``$BENCH_CHECK_SLEEP`` (seconds)
  it first sleeps that long: a fixed check time standing in for an engine build
  (``parallel_bench.py``).
"""

from __future__ import annotations

import json
import mmap
import os
import sys
import time
from collections.abc import Iterator


def _process_age() -> float | None:
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start
    except (OSError, ValueError, IndexError):
        return None


_T0 = time.monotonic()


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: memoryview, start: int, end: int):  # type: ignore[no-untyped-def]
    """(field number, wire type, value or (begin, end) of a length-delimited field)."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 2:
            length, pos = _varint(buf, pos)
            yield number, wire, (pos, pos + length)
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def graph_fields(path: str) -> Iterator[tuple[memoryview, int, int, tuple[int, int]]]:
    """(the mapped file, field number, wire type, span) of each field of the top-level graph
    (ModelProto.graph) of the ONNX model at ``path``, read through ``mmap``."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        buf = memoryview(mm)
        try:
            for number, wire, span in _fields(buf, 0, len(buf)):
                if number == 7 and wire == 2:  # ModelProto.graph
                    for gnum, gwire, gspan in _fields(buf, *span):
                        yield buf, gnum, gwire, gspan
        finally:
            buf.release()


def graph_nodes(path: str) -> list[tuple[str, str]]:
    """(name, op_type) of each top-level node of the ONNX model at ``path``."""
    nodes: list[tuple[str, str]] = []
    for buf, gnum, gwire, nspan in graph_fields(path):
        if gnum != 1 or gwire != 2:  # GraphProto.node
            continue
        name = op = ""
        for fnum, fwire, val in _fields(buf, *nspan):
            if fwire == 2 and fnum == 3:
                name = bytes(buf[val[0] : val[1]]).decode()
            elif fwire == 2 and fnum == 4:
                op = bytes(buf[val[0] : val[1]]).decode()
        nodes.append((name, op))
    return nodes


def graph_edges(path: str) -> tuple[list[tuple[str, list[str], list[str]]], set[str]]:
    """((name, inputs, outputs) of each top-level node, names of the graph inputs), from the wire
    format like ``graph_nodes``."""
    nodes: list[tuple[str, list[str], list[str]]] = []
    graph_inputs: set[str] = set()
    for buf, gnum, gwire, gspan in graph_fields(path):
        if gnum == 11 and gwire == 2:  # GraphProto.input: ValueInfoProto.name is field 1
            for vnum, vwire, val in _fields(buf, *gspan):
                if vnum == 1 and vwire == 2:
                    graph_inputs.add(bytes(buf[val[0] : val[1]]).decode())
        if gnum != 1 or gwire != 2:  # GraphProto.node
            continue
        name, inputs, outputs = "", [], []
        for fnum, fwire, val in _fields(buf, *gspan):
            if fwire != 2:
                continue
            text = bytes(buf[val[0] : val[1]]).decode() if fnum in (1, 2, 3) else ""
            if fnum == 1:
                inputs.append(text)
            elif fnum == 2:
                outputs.append(text)
            elif fnum == 3:
                name = text
        nodes.append((name, inputs, outputs))
    return nodes, graph_inputs


def finish(check: str, failed: bool, nodes: int, reason: str = "") -> None:
    time.sleep(float(os.environ.get("BENCH_CHECK_SLEEP", "0")))  # parallel_bench.py: an engine build
    age = _process_age()
    duration = age if age is not None else time.monotonic() - _T0
    log = os.environ.get("BENCH_CHECK_LOG")
    if log:
        line = {"check": check, "end": time.time(), "duration_s": round(duration, 4), "fail": failed, "nodes": nodes}
        with open(log, "a") as f:
            f.write(json.dumps(line) + "\n")
    if failed:
        print(f"BENCH-FAIL: {reason}")
        sys.exit(1)
    print("ok")
    sys.exit(0)

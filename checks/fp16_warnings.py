"""onnxconverter-common warns once per clamped weight ("the float32 number 1e-09 will be truncated
to 1e-07"): 8 to 12 lines for each run of an fp16 check on a real model. ``summarised_fp16_warnings``
collects them and reports one line instead; other warnings pass through unchanged."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

TRUNCATED = "will be truncated to"


@contextmanager
def summarised_fp16_warnings(report: Callable[[str], None]) -> Iterator[None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    clamped = [w for w in caught if TRUNCATED in str(w.message)]
    for other in caught:
        if TRUNCATED not in str(other.message):
            warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
    if clamped:
        report(
            f"fp16 conversion (onnxconverter-common): {len(clamped)} weight value(s) outside fp16's range were "
            f"clamped, e.g. {str(clamped[0].message)[:120]}"
        )

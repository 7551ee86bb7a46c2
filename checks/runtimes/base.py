"""What every runtime shares: the ``Runner`` protocol and ``RuntimeUnavailableError`` (split from
the package so the runtimes and ``make_runner``, which picks among them, do not import each other)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np


class RuntimeUnavailableError(RuntimeError):
    """The runtime (or execution provider) is not installed here: an infra-error, not a verdict."""


class Runner(Protocol):
    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...

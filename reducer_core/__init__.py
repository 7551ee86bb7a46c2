"""onnx-reducer's pure engine: graph indexing, extraction, strategies and the reduction loop.

Imports only the standard library, numpy and onnx. Checks, files and processes are supplied by
the shell (``engine``, ``reducer_cli``, ``worker``); see ``machine.ReductionMachine`` (the
reduction session as a step machine over work requests, running ``flow.ReductionFlow``) and
``driver.drive`` (the same session run one request at a time).
"""

from reducer_core.candidate import Candidate
from reducer_core.errors import ReducerError
from reducer_core.graph import GraphIndex
from reducer_core.verdict import Verdict, VerdictKind

__all__ = ["Candidate", "GraphIndex", "ReducerError", "Verdict", "VerdictKind"]

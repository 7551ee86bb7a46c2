"""onnx-reducer's pure engine: graph indexing, extraction, strategies and the reduction loop.

Imports only the standard library, numpy and onnx. Checks (the oracle), files and processes are
supplied by the shell (``reducer_cli``, ``worker``); see ``reducer.Reduction``.
"""

from reducer_core.candidate import Candidate
from reducer_core.errors import ReducerError
from reducer_core.graph import GraphIndex
from reducer_core.verdict import Verdict, VerdictKind

__all__ = ["Candidate", "GraphIndex", "ReducerError", "Verdict", "VerdictKind"]

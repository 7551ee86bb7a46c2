"""The fast iteration writer (pre-serialized pieces) produces exactly ``extract``'s model."""

from __future__ import annotations

import itertools

import numpy as np
import onnx

from reducer_core.candidate import Candidate
from reducer_core.extract import SerializedPieces, extract, extract_bytes
from tests.models import branchy_model, index_of


def test_extract_bytes_parses_equal_to_extract_for_every_subset() -> None:
    index = index_of(branchy_model())
    pieces = SerializedPieces(index)
    h = np.full((2, 3), 0.5, dtype=np.float32)
    for size in range(1, len(index) + 1):
        for nodes in itertools.combinations(range(len(index)), size):
            for primary in (None, nodes[0]):
                candidate = Candidate(frozenset(nodes), primary)
                expected = extract(index, candidate, {"h": h}, ir_version_cap=8)
                got = onnx.ModelProto.FromString(extract_bytes(pieces, candidate, {"h": h}, ir_version_cap=8))
                assert got == expected

"""reducer_core.verification.file_sha256: the one file digest the engine, the bundle and the CLI
share (issue 27: was four copies)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from reducer_core.verification import file_sha256


@pytest.mark.parametrize("size", [0, 5, (1 << 20) - 1, 1 << 20, (3 << 20) + 7])
def test_the_digest_of_a_file_read_in_chunks_is_that_of_its_bytes(tmp_path: Path, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()

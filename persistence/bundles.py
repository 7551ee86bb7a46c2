"""Tar bundles of a model and its external-data files (downloads and stored results)."""

from __future__ import annotations

import tarfile
from collections.abc import Iterable
from pathlib import Path


def write_bundle(target: Path, members: Iterable[tuple[str, Path]]) -> Path:
    """Write an uncompressed tar of ``(name inside the archive, file on disk)`` pairs."""
    with tarfile.open(target, "w") as archive:
        for name, path in members:
            info = archive.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            with open(path, "rb") as source:
                archive.addfile(info, source)
    return target

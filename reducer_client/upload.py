"""What an upload sends, streamed from disk: a file, or a tar bundle assembled on the fly from a
model and its external-data files (no copy of the weights is written), inside a multipart body
whose length is known up front. A progress callback sees the file bytes as they are sent."""

from __future__ import annotations

import tarfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from reducer_client.errors import ModelBundleError

CHUNK = 1024 * 1024
BLOCK = tarfile.BLOCKSIZE
RECORD = tarfile.RECORDSIZE

Progress = Callable[[int, int], None]


def _read_exactly(path: Path, size: int) -> Iterator[bytes]:
    """The file's first ``size`` bytes in chunks; a file that shrank since it was measured is an error."""
    left = size
    with open(path, "rb") as source:
        while left:
            chunk = source.read(min(CHUNK, left))
            if not chunk:
                raise ModelBundleError(f"{path.name} changed while it was being uploaded (it got shorter).")
            left -= len(chunk)
            yield chunk


class UploadSource:
    """Something to upload: a name (the multipart filename), a size and its bytes in chunks."""

    name: str
    size: int

    def chunks(self) -> Iterator[bytes]:
        raise NotImplementedError


class FileSource(UploadSource):
    def __init__(self, path: Path, name: str | None = None) -> None:
        self.path, self.name = path, name or path.name
        self.size = path.stat().st_size

    def chunks(self) -> Iterator[bytes]:
        return _read_exactly(self.path, self.size)


@dataclass(frozen=True)
class _Member:
    arcname: str
    path: Path
    size: int

    def header(self) -> bytes:
        info = tarfile.TarInfo(self.arcname)
        info.size, info.mode, info.mtime = self.size, 0o644, 0
        return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


class TarSource(UploadSource):
    """An uncompressed tar of ``(name in the archive, file on disk)`` pairs, produced while it is sent."""

    def __init__(self, name: str, members: Sequence[tuple[str, Path]]) -> None:
        self.name = name
        self.members = [_Member(arcname, path, path.stat().st_size) for arcname, path in members]
        body = sum(len(m.header()) + m.size + _padding(m.size, BLOCK) for m in self.members) + 2 * BLOCK
        self.size = body + _padding(body, RECORD)

    def chunks(self) -> Iterator[bytes]:
        sent = 0
        for member in self.members:
            header = member.header()
            yield header
            yield from _read_exactly(member.path, member.size)
            pad = _padding(member.size, BLOCK)
            yield b"\0" * pad
            sent += len(header) + member.size + pad
        sent += 2 * BLOCK
        yield b"\0" * (2 * BLOCK + _padding(sent, RECORD))


def _padding(size: int, unit: int) -> int:
    return -size % unit


class MultipartBody:
    """A ``multipart/form-data`` body of text fields and file parts, with its exact length."""

    def __init__(
        self, fields: dict[str, str], files: Mapping[str, UploadSource] | Sequence[tuple[str, UploadSource]]
    ) -> None:
        """``files``: name -> source, or (name, source) pairs (a name repeated: several parts, in order)."""
        self.boundary = f"onnx-reducer-{uuid.uuid4().hex}"
        self.parts: list[bytes | UploadSource] = []
        for name, value in fields.items():
            self.parts += [self._head(name) + value.encode() + b"\r\n"]
        for name, source in files.items() if isinstance(files, Mapping) else files:
            head = self._head(name, f'; filename="{_quoted(source.name)}"', "application/octet-stream")
            self.parts += [head, source, b"\r\n"]
        self.parts.append(f"--{self.boundary}--\r\n".encode())
        self.file_bytes = sum(p.size for p in self.parts if isinstance(p, UploadSource))
        self.length = sum(p.size if isinstance(p, UploadSource) else len(p) for p in self.parts)

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def _head(self, name: str, extra: str = "", content_type: str | None = None) -> bytes:
        lines = [f"--{self.boundary}", f'Content-Disposition: form-data; name="{name}"{extra}']
        if content_type is not None:
            lines.append(f"Content-Type: {content_type}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def stream(self, progress: Progress | None = None) -> Iterator[bytes]:
        """The body from its start (call again for a retry); ``progress(sent, total)`` after each chunk."""
        sent = 0
        if progress is not None:
            progress(0, self.file_bytes)
        for part in self.parts:
            if isinstance(part, bytes):
                yield part
                continue
            for chunk in part.chunks():
                yield chunk
                sent += len(chunk)
                if progress is not None:
                    progress(sent, self.file_bytes)


def _quoted(filename: str) -> str:
    """A filename safe inside the quoted Content-Disposition parameter."""
    return "".join(c for c in filename if c not in '"\\\r\n') or "model.onnx"

"""Safe unpacking of a model bundle (.tar, .tar.gz/.bz2/.xz or .zip with external data) into a
fresh folder.

Every member is checked before it is written: no absolute names, no '..', no symlinks, hardlinks
or device files, at most ``max_members`` members and ``max_bytes`` unpacked in all (archive bombs).
A tar is read as a stream, member after member, and its decompressed bytes are counted as they are
read, so a bomb is refused as soon as it crosses the cap, not after it was inflated. Tar extraction
also uses ``filter="data"``."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import shutil
import stat
import struct
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import BinaryIO
from zlib import error as zlib_error

from api.problems import ProblemError, field_errors
from reducer_core.tensors import BudgetExceededError, ByteBudget

TAR_MEMBER_OVERHEAD = 1024  # a member's header and padding, counted against the decompressed cap
MIN_ZIP_MEMBERS = 64
ZIP_BYTES_PER_MEMBER = 128  # a member holding a .npy takes more (two headers, its name twice, the array's header)
END_RECORD, ZIP64_LOCATOR, CENTRAL_ENTRY = b"PK\x05\x06", b"PK\x06\x07", b"PK\x01\x02"
ZIP64_RECORD_SIZE = 56


def _bad(detail: str, title: str = "Unsafe bundle") -> ProblemError:
    return ProblemError(422, title, detail)


def _check_name(name: str, label: str = "Bundle", title: str = "Unsafe bundle") -> None:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise _bad(f"{label} member '{name}' has an absolute path; use paths relative to the archive.", title)
    if ".." in path.parts:
        raise _bad(f"{label} member '{name}' contains '..'; keep every file inside the archive.", title)


def _too_many(label: str, max_members: int, title: str) -> ProblemError:
    return _bad(
        f"The {label.lower()} holds more than {max_members} members (MAX_BUNDLE_MEMBERS); pack the model "
        "with fewer files (e.g. onnx.save_model(..., all_tensors_to_one_file=True)).",
        title,
    )


def _too_big(label: str, max_bytes: int, title: str) -> ProblemError:
    return _bad(f"The {label.lower()} unpacks to more than {max_bytes} bytes (MAX_EXTRACTED_BYTES).", title)


def check_zip_members(
    archive: zipfile.ZipFile,
    max_bytes: int,
    label: str = "Bundle",
    title: str = "Unsafe bundle",
    max_members: int | None = None,
) -> list[zipfile.ZipInfo]:
    """Every member of a zip, checked before anything is read: relative names without '..', no
    symlinks, at most ``max_members`` members and ``max_bytes`` unpacked in all (zip bombs; a
    member never reads back more than it declares). ``label`` and ``title`` name the upload in
    the 422 problem."""
    infos = archive.infolist()
    if max_members is not None and len(infos) > max_members:
        raise _too_many(label, max_members, title)
    total = 0
    for info in infos:
        _check_name(info.filename, label, title)
        if stat.S_ISLNK(info.external_attr >> 16):
            raise _bad(f"{label} member '{info.filename}' is a symlink; archives must hold real files.", title)
        total += info.file_size
        if total > max_bytes:
            raise _too_big(label, max_bytes, title)
    return infos


def zip_member_limit(size: int) -> int:
    """How many members a zip of ``size`` bytes of arrays may hold: read, each costs Python about
    500 bytes (a ``ZipInfo``), so a zip of empty members would need several times its size."""
    return max(MIN_ZIP_MEMBERS, size // ZIP_BYTES_PER_MEMBER)


def zip_member_count(path: Path, stop_after: int) -> int:
    """How many members ``zipfile`` would read from the zip at ``path``, found without it: the count
    its end-of-central-directory record declares (zip64's where it says 0xFFFF), or, when more, the
    entries its central directory holds (a record may declare fewer than ``zipfile`` then parses),
    walked header by header and no further than ``stop_after`` + 1. ``zipfile.BadZipFile`` when
    the zip has no end record."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        start = max(0, size - (22 + 0xFFFF))  # the record (22 bytes) and the longest comment
        handle.seek(start)
        tail = handle.read()
        at = tail.rfind(END_RECORD)
        if at < 0 or len(tail) < at + 22:
            raise zipfile.BadZipFile("no end of central directory record")
        count, directory_size = struct.unpack("<HI", tail[at + 10 : at + 16])
        directory_end = start + at
        locator = at - 20
        if locator >= 0 and tail[locator : locator + 4] == ZIP64_LOCATOR:
            (record,) = struct.unpack("<Q", tail[locator + 8 : locator + 16])
            handle.seek(record + 32)
            declared, directory_size = struct.unpack("<QQ", handle.read(16).ljust(16, b"\xff"))
            count = declared if count == 0xFFFF else count
            directory_end = start + locator - ZIP64_RECORD_SIZE
        if count > stop_after:
            return int(count)
        return max(int(count), _central_entries(handle, directory_end - directory_size, directory_size, stop_after))


def _central_entries(handle: BinaryIO, offset: int, size: int, stop_after: int) -> int:
    """The central directory's entries from ``offset`` (as ``zipfile`` walks them: a fixed header,
    then a name, extra field and comment of the lengths it gives), counted up to ``stop_after`` + 1."""
    handle.seek(max(0, offset))
    count = walked = 0
    while walked < size and count <= stop_after:
        header = handle.read(46)
        if len(header) < 46 or header[:4] != CENTRAL_ENTRY:
            break  # (zipfile refuses such a directory itself)
        skip = sum(struct.unpack("<HHH", header[28:34]))
        handle.seek(skip, os.SEEK_CUR)
        walked += 46 + skip
        count += 1
    return count


def check_zip_member_count(path: Path, what: str) -> str | None:
    """Why the zip of arrays at ``path`` holds too many members for its size (None: it does not)."""
    size = path.stat().st_size
    limit = zip_member_limit(size)
    count = zip_member_count(path, limit)
    if count <= limit:
        return None
    counted = f"{count} members, more than" if count > limit + 1 else "more members than"  # (a walk stops there)
    return f"{what} holds {counted} the {limit} a zip of {size} bytes of arrays may hold"


def charge_zip_members(infos: list[zipfile.ZipInfo], budget: ByteBudget) -> None:
    """``BudgetExceededError`` when the archive's members declare more bytes, unpacked, than the
    upload's budget has left (a zip bomb is refused from its directory, before a member is read)."""
    declared = sum(info.file_size for info in infos)
    left = budget.left
    if left is not None and declared > left:
        raise BudgetExceededError(
            f"its members unpack to {declared} bytes, more than the {left} left of the {budget.limit} "
            f"allowed for {budget.what}"
        )


def is_bundle(path: Path) -> bool:
    return zipfile.is_zipfile(path) or _is_tar(path)


def _is_tar(path: Path) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except OSError:
        return False


def extract_bundle(archive: Path, dest: Path, max_bytes: int, max_members: int) -> None:
    dest.mkdir(parents=True, exist_ok=False)
    if zipfile.is_zipfile(archive):
        _extract_zip(archive, dest, max_bytes, max_members)
    else:
        _extract_tar(archive, dest, max_bytes, max_members)


class _CappedReader(io.RawIOBase):
    """A readable stream that refuses to give more than ``cap`` bytes (the decompressed side)."""

    def __init__(self, source: io.BufferedIOBase, cap: int, refusal: ProblemError) -> None:
        super().__init__()
        self.source, self.cap, self.refusal, self.count = source, cap, refusal, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.source.read(len(buffer))
        self.count += len(data)
        if self.count > self.cap:
            raise self.refusal
        buffer[: len(data)] = data
        return len(data)


def _decompressed(archive: Path) -> io.BufferedIOBase:
    """The tar stream inside ``archive``: gzip, bzip2 and xz are decompressed as they are read."""
    with open(archive, "rb") as handle:
        magic = handle.read(6)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.open(archive, "rb")
    if magic.startswith(b"BZh"):
        return bz2.open(archive, "rb")
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.open(archive, "rb")
    return open(archive, "rb")


def _extract_tar(archive: Path, dest: Path, max_bytes: int, max_members: int) -> None:
    cap = max_bytes + (max_members + 2) * TAR_MEMBER_OVERHEAD
    try:
        with _decompressed(archive) as raw:
            stream = io.BufferedReader(_CappedReader(raw, cap, _too_big("Bundle", max_bytes, "Unsafe bundle")))
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                _extract_members(tar, dest, max_bytes, max_members)
    except (tarfile.TarError, OSError, EOFError, lzma.LZMAError, zlib_error) as exc:
        raise _bad(f"The tar bundle cannot be read: {type(exc).__name__}") from exc


def _extract_members(tar: tarfile.TarFile, dest: Path, max_bytes: int, max_members: int) -> None:
    """Check each member as the stream reaches it, then write it (nothing is read twice)."""
    total = 0
    for count, member in enumerate(tar, start=1):
        if count > max_members:
            raise _too_many("Bundle", max_members, "Unsafe bundle")
        _check_name(member.name)
        if member.issym() or member.islnk():
            kind = "symlink" if member.issym() else "hardlink"
            raise _bad(f"Bundle member '{member.name}' is a {kind}; bundles must hold real files.")
        if not (member.isfile() or member.isdir()):
            raise _bad(f"Bundle member '{member.name}' is not a regular file.")
        total += member.size
        if total > max_bytes:
            raise _too_big("Bundle", max_bytes, "Unsafe bundle")
        tar.extract(member, dest, filter="data")


def _extract_zip(archive: Path, dest: Path, max_bytes: int, max_members: int) -> None:
    try:
        if zip_member_count(archive, max_members) > max_members:  # (before zipfile reads them all)
            raise _too_many("Bundle", max_members, "Unsafe bundle")
        with zipfile.ZipFile(archive) as bundle:
            infos = check_zip_members(bundle, max_bytes, max_members=max_members)
            for info in infos:
                target = dest / PurePosixPath(info.filename.replace("\\", "/"))
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with bundle.open(info) as source, open(target, "wb") as sink:
                    shutil.copyfileobj(source, sink, 1024 * 1024)
    except (zipfile.BadZipFile, OSError) as exc:
        raise _bad(f"The zip bundle cannot be read: {exc}") from exc


def find_model(root: Path, wanted: str | None) -> Path:
    """The bundle's model: the one .onnx file, or the one named by the ``model_path`` field."""
    if wanted:
        _check_name(wanted)
        path = root / wanted
        if not path.is_file() or path.is_symlink():
            detail = f"model_path '{wanted}' is not a file in the bundle."
            raise ProblemError(422, "Invalid upload", detail, errors=field_errors("model_path", detail))
        return path
    models = sorted(p for p in root.rglob("*.onnx") if p.is_file())
    if len(models) != 1:
        found = ", ".join(str(p.relative_to(root)) for p in models[:5]) or "none"
        detail = f"The bundle must hold exactly one .onnx file (found: {found}); name it with the model_path field."
        raise ProblemError(422, "Invalid upload", detail, errors=field_errors("model_path", detail))
    return models[0]

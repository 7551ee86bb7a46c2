"""A content-addressed artifact folder (a shared volume in a farm).

Blobs live at ``sha256/ab/abcdef...``. Writes stream through a running sha256 into a temporary
file that is renamed into place, so a blob is either complete or absent. ``put_file`` hardlinks an
existing file (a job's weights) instead of copying it when the store is on the same filesystem.

A blob's modification time is when it was last stored: storing content that is already there
touches it, so an unreferenced blob can be told from one that a running job is about to refer to
(a check's model is stored before its check and recorded after its verdict, and may be byte for
byte another job's, of any team). Deleting a job and the sweep (``persistence.retention``,
``worker/maintenance.py``) remove only blobs no row refers to and nothing stored for longer than
any check runs; ``delete_if_stored_before`` decides that age atomically with the removal, so a job
storing the blob at that very moment keeps it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

ASIDE_SUFFIX = ".deleting"  # a blob a sweep moved aside in ``tmp/`` while it asks again
CHUNK = 1024 * 1024


@dataclass(frozen=True)
class StoredBlob:
    key: str
    sha256: str
    size: int


class ArtifactStoreError(Exception):
    """The object store refused or could not be reached (the message says what to check; it may
    name the endpoint: log it, never answer it). ``transient``: the store could not be reached (a
    connection refused or cut, a 5xx): it may work once the store is back (a worker then leaves
    the job to be taken again instead of failing it; the api answers 503)."""

    def __init__(self, message: str, transient: bool = True) -> None:
        super().__init__(message)
        self.transient = transient


class CorruptBlobError(ArtifactStoreError):
    """The store's copy of a blob does not match its sha256 (trying again does not help)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False)


class BlobTooLargeError(Exception):
    """The stream exceeded the size limit; nothing was stored."""


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.tmp_dir = root / "tmp"
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        (root / "sha256").mkdir(parents=True, exist_ok=True)

    @staticmethod
    def key_for(sha256: str) -> str:
        return f"sha256/{sha256[:2]}/{sha256}"

    def local_path(self, key: str) -> Path:
        """Where the blob lives in this folder (for a remote store: its local cache), present or not."""
        if not key.startswith("sha256/") or ".." in key:
            raise ValueError(f"not a storage key: {key!r}")
        return self.root / key

    def path(self, key: str) -> Path:
        """A local file holding the blob (a remote store downloads it into its cache first)."""
        return self.local_path(key)

    def open(self, key: str) -> BinaryIO:
        return open(self.path(key), "rb")

    def exists(self, key: str) -> bool:
        return self.local_path(key).is_file()

    def download_url(self, key: str, filename: str) -> str | None:
        """A short-lived URL a client can download the blob from directly; None: serve it."""
        return None

    def temp_path(self, suffix: str = "") -> Path:
        return self.tmp_dir / f"{uuid.uuid4().hex}{suffix}"

    def put_stream(self, chunks: Iterable[bytes], max_size: int | None = None) -> StoredBlob:
        tmp = self.temp_path()
        digest, size = hashlib.sha256(), 0
        try:
            with open(tmp, "wb") as sink:
                for chunk in chunks:
                    size += len(chunk)
                    if max_size is not None and size > max_size:
                        raise BlobTooLargeError(f"more than {max_size} bytes")
                    digest.update(chunk)
                    sink.write(chunk)
            return self.adopt(tmp, digest.hexdigest(), size)
        finally:
            tmp.unlink(missing_ok=True)

    def put_file(self, path: Path) -> StoredBlob:
        """Store an existing file by hardlink (no copy) or, across filesystems, by one copy."""
        digest, size = hashlib.sha256(), 0
        with open(path, "rb") as source:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
        sha = digest.hexdigest()
        target = self.local_path(self.key_for(sha))
        if not _touch(target):
            tmp = self.temp_path()
            try:
                os.link(path, tmp)
            except OSError:
                shutil.copyfile(path, tmp)
            self._install(tmp, target)
        return StoredBlob(self.key_for(sha), sha, size)

    def adopt(self, tmp: Path, sha256: str, size: int) -> StoredBlob:
        """Move a fully written temporary file (whose hash is known) into place."""
        target = self.local_path(self.key_for(sha256))
        if _touch(target):
            tmp.unlink(missing_ok=True)
        else:
            self._install(tmp, target)
        return StoredBlob(self.key_for(sha256), sha256, size)

    @staticmethod
    def _install(tmp: Path, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, target)

    def delete(self, key: str) -> None:
        self.local_path(key).unlink(missing_ok=True)

    def keys_stored_before(self, seconds: float) -> Iterator[str]:
        """Keys of the blobs last stored more than ``seconds`` ago."""
        for path in (self.root / "sha256").glob("*/*"):
            if _stored_before(path, seconds):
                yield f"sha256/{path.parent.name}/{path.name}"

    def delete_if_stored_before(self, key: str, seconds: float, unreferenced: Callable[[], bool] | None = None) -> bool:
        """Delete the blob unless it was stored within ``seconds``. A job storing it meanwhile
        keeps it: the blob is first moved aside (atomically: a store after the move finds no blob
        and installs its own), then its age is read again from the moved file (a store before the
        move touched it): stored meanwhile, it is put back unless a new copy is already there.
        ``unreferenced`` (the caller's question to the database, asked again once the blob is
        aside): False puts it back too (a job's artifact row came to refer to it meanwhile)."""
        path = self.local_path(key)
        if not _stored_before(path, seconds):
            return False
        aside = self.temp_path(ASIDE_SUFFIX)
        aside = aside.with_name(f"{path.name}.{aside.name}")  # <sha256>.<id>.deleting: the next sweep can tell whose
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return False  # deleted meanwhile
        gone = False
        try:
            gone = _stored_before(aside, seconds) and (unreferenced is None or unreferenced())
        finally:  # (an error asking the database keeps the blob too)
            if not gone:
                with contextlib.suppress(FileExistsError):  # (a newer copy may be there already)
                    os.link(aside, path)  # stored again meanwhile: back in place
            aside.unlink(missing_ok=True)
        return gone

    def recover_asides(self, older_than_s: float, referenced: Callable[[list[str]], set[str]]) -> int:
        """Blobs a sweep killed between its steps left aside (``tmp/<sha256>.<id>.deleting``, moved
        there more than ``older_than_s`` ago: a rename sets the file's ctime): put back where a row
        refers to them and the store lacks them, then removed. How many were put back."""
        cutoff = time.time() - older_than_s
        owners: dict[Path, str] = {}
        for aside in self.tmp_dir.glob(f"*{ASIDE_SUFFIX}"):
            with contextlib.suppress(OSError):  # (gone meanwhile)
                if aside.stat().st_ctime < cutoff:
                    owners[aside] = self.key_for(aside.name.split(".", 1)[0])
        wanted = referenced(sorted(set(owners.values()))) if owners else set()
        restored = 0
        for aside, key in owners.items():
            target = self.local_path(key)
            if key in wanted and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError, FileNotFoundError):
                    os.link(aside, target)
                    restored += 1
            aside.unlink(missing_ok=True)
        return restored


def _stored_before(path: Path, seconds: float) -> bool:
    try:
        return path.stat().st_mtime < time.time() - seconds
    except OSError:
        return False  # deleted meanwhile


def _touch(path: Path) -> bool:
    """Mark an existing blob as stored now; False when there is none."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    except OSError:  # not ours to touch (another user's file): it is there all the same
        return path.exists()
    return True

"""Where things live under DATA_DIR: the artifact store, each job's unpacked model and work folder,
and each worker process's scratch folder (``scratch/<host>/<pid>-<start>``: the temporary files of
its checks, never the system temp folder; a folder whose process is gone is swept)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from persistence.s3store import S3ArtifactStore, S3Config
from persistence.store import ArtifactStore

OTHER_HOSTS_SCRATCH_S = 86400.0  # another host's scratch nothing wrote to for a day: that host is gone


@dataclass(frozen=True)
class DataLayout:
    root: Path
    s3: S3Config | None = None  # artifacts in an S3-compatible bucket, cached under root/artifacts

    @cached_property
    def store(self) -> ArtifactStore:
        if self.s3 is not None:
            return S3ArtifactStore(self.root / "artifacts", self.s3)
        return ArtifactStore(self.root / "artifacts")

    def job_dir(self, job_id: str) -> Path:
        if not job_id.isalnum():
            raise ValueError(f"bad job id {job_id!r}")
        return self.root / "jobs" / job_id

    def model_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "model"

    def work_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "work"

    def staging_dir(self) -> Path:
        path = self.root / "staging"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def sweep_staging(self, max_age_s: float) -> list[str]:
        """Remove upload staging folders nothing has written to for ``max_age_s`` (an api killed
        mid-upload leaves its folder behind). Younger ones may be another api's upload in
        progress and stay. Stored artifacts never live here. Returns the removed folders' names."""
        removed: list[str] = []
        cutoff = time.time() - max_age_s
        for folder in self.staging_dir().iterdir():
            if folder.is_dir() and not folder.is_symlink() and _last_write(folder) < cutoff:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder.name)
        return removed

    def scratch_root(self, host: str | None = None) -> Path:
        return self.root / "scratch" / _safe_name(host or socket.gethostname())

    def use_scratch(self) -> Path:
        """This process's scratch folder, made now and used for every temporary file it makes from
        now on (``tempfile.tempdir``: a check's folder, a fallback inference's, golden values').
        Called where a worker process starts; sweeps the folders of dead processes first."""
        self.sweep_scratch(OTHER_HOSTS_SCRATCH_S)
        folder = self.scratch_root() / _process_key(os.getpid())
        shutil.rmtree(folder, ignore_errors=True)  # a dead process's, whose pid this one got
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.tempdir = str(folder)
        return folder

    def sweep_scratch(self, other_hosts_after_s: float | None = None) -> list[str]:
        """Remove this host's scratch folders whose process is gone (killed: nothing removed its
        check's folder) and, with ``other_hosts_after_s``, other hosts' folders nothing wrote to
        for that long (a host that never came back). Returns the removed folders' names."""
        removed: list[str] = []
        mine = self.scratch_root()
        if mine.is_dir():
            for folder in mine.iterdir():
                if folder.is_dir() and not folder.is_symlink() and not _process_alive(folder.name):
                    shutil.rmtree(folder, ignore_errors=True)
                    removed.append(folder.name)
        hosts = self.root / "scratch"
        if other_hosts_after_s is not None and hosts.is_dir():
            cutoff = time.time() - other_hosts_after_s
            for host in hosts.iterdir():
                if host == mine or not host.is_dir() or host.is_symlink():
                    continue
                for folder in host.iterdir():
                    if folder.is_dir() and not folder.is_symlink() and _last_write(folder) < cutoff:
                        shutil.rmtree(folder, ignore_errors=True)
                        removed.append(f"{host.name}/{folder.name}")
        return removed


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".") or "host"


def _start_ticks(pid: int) -> str | None:
    """The process's start time (clock ticks after boot), which tells a reused pid apart; None:
    no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]


def _process_key(pid: int) -> str:
    return f"{pid}-{_start_ticks(pid) or 0}"


def _process_alive(key: str) -> bool:
    pid = key.partition("-")[0]
    if not pid.isdigit():
        return True  # not a process's folder: left alone
    return _process_key(int(pid)) == key if Path("/proc/self/stat").exists() else _pid_exists(int(pid))


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _last_write(folder: Path) -> float:
    """The newest modification time of ``folder`` and everything in it."""
    newest = folder.lstat().st_mtime
    for path in folder.rglob("*"):
        try:
            newest = max(newest, path.lstat().st_mtime)
        except OSError:
            continue
    return newest

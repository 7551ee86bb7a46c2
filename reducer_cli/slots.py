"""``--jobs`` and ``--devices``: how many checks run at once, each slot's device, and each slot's
working folder.

With ``--jobs N`` (N > 1) slot ``i`` writes its iteration artifact into its own folder,
``onnx_reducer_slots/slot<i>/`` under the working folder, at the relative path the check command
uses (``polygraphy_debug.onnx``, or ``--iter-artifact``), and the command runs there. So that the
command's other relative paths keep working (``--load-inputs inputs.json``, ``python check.py``),
each slot folder *mirrors* the working folder: a symbolic link to every entry in it, except the
names the slot writes itself (the iteration artifact, its weight files, ``--iter-info``,
``--artifacts``)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

from checks.slots import DEVICE_ENV
from reducer_core.errors import UsageError

MAX_JOBS = 64
SLOTS_DIR = "onnx_reducer_slots"
MARKER = ".onnx-reducer-slots"  # written in SLOTS_DIR: only a folder holding it is ever removed
_DEVICE = re.compile(r"[A-Za-z0-9_:.-]+")


@dataclass(frozen=True)
class SlotPlan:
    """``jobs`` slots; ``devices``: one ``CUDA_VISIBLE_DEVICES`` value per slot, or none."""

    jobs: int = 1
    devices: tuple[str, ...] = ()

    def env(self, slot: int) -> dict[str, str]:
        """What slot ``slot`` (1-based) adds to its check's environment."""
        return {DEVICE_ENV: self.devices[slot - 1]} if self.devices else {}

    @property
    def parallel(self) -> bool:
        return self.jobs > 1


def slot_plan(jobs: int | None, devices: str | None) -> SlotPlan:
    """Validate ``--jobs`` and ``--devices``; ``--devices`` alone sets one slot per device."""
    listed = _devices(devices) if devices is not None else ()
    count = jobs if jobs is not None else max(len(listed), 1)
    if count < 1:
        raise UsageError(f"--jobs {count}: give the number of checks to run at once, 1 or more (default 1).")
    if count > MAX_JOBS:
        raise UsageError(f"--jobs {count}: at most {MAX_JOBS} checks can run at once.")
    if listed and len(listed) != count:
        raise UsageError(
            f"--devices lists {len(listed)} device(s) for --jobs {count}: give one device per slot "
            f"(a device may repeat to share it, e.g. --jobs 4 --devices 0,0,1,1), or leave out --jobs."
        )
    return SlotPlan(count, listed)


def _devices(text: str) -> tuple[str, ...]:
    devices = tuple(part.strip() for part in text.split(","))
    for device in devices:
        if not _DEVICE.fullmatch(device):
            raise UsageError(
                f"--devices {text!r}: {device!r} is not a device; give a comma-separated list of GPU "
                "indices or UUIDs, one per slot, e.g. --devices 0,1,2,3."
            )
    return devices


def slot_relative(option: str, value: str) -> PurePath:
    """``value`` of ``option`` as a path inside a slot folder: relative, not leaving it."""
    path = PurePath(value)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise UsageError(
            f"{option} {value}: with --jobs above 1 every slot writes this file in its own folder, so "
            f"give a path relative to the working folder (as the check command names it), without '..'."
        )
    return path


class SlotFolders:
    """``onnx_reducer_slots/slot1..slotN`` under ``base`` (the working folder), each mirroring
    ``base`` except ``private`` names (top-level names the slots write themselves)."""

    def __init__(self, base: Path, count: int, private: Iterable[str]) -> None:
        self.base = base
        self.root = base / SLOTS_DIR
        self.count = count
        self.private = {SLOTS_DIR} | {name for item in private for name in (item, f"{item}.tmp")}

    def folder(self, slot: int) -> Path:
        return self.root / f"slot{slot}"

    def path(self, slot: int, relative: PurePath) -> Path:
        return self.folder(slot) / relative

    def create(self) -> None:
        """Fresh slot folders (those of an earlier run are removed), each mirroring ``base``."""
        self._remove_stale()
        self.root.mkdir()
        (self.root / MARKER).write_text("Slot folders of onnx-reducer reduce --jobs; removed by its next run.\n")
        entries = sorted(entry for entry in self.base.iterdir() if entry.name not in self.private)
        for slot in range(1, self.count + 1):
            folder = self.folder(slot)
            folder.mkdir()
            for entry in entries:
                (folder / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())

    def remove(self) -> None:
        """Remove the slot folders (links only: never what they point to)."""
        shutil.rmtree(self.root, ignore_errors=True)

    def _remove_stale(self) -> None:
        if not self.root.exists() and not self.root.is_symlink():
            return
        if self.root.is_symlink() or not (self.root / MARKER).is_file():
            raise UsageError(
                f"{SLOTS_DIR} exists in the working folder and was not made by onnx-reducer: move it away "
                "(--jobs above 1 keeps each slot's files there)."
            )
        self.remove()


def top_level_names(paths: Sequence[PurePath]) -> set[str]:
    return {path.parts[0] for path in paths if path.parts}

"""``--jobs`` and ``--devices``: how many checks run at once, each slot's device, and each slot's
working folder.

With ``--jobs N`` (N > 1) slot ``i`` writes its iteration artifact into its own folder and runs the
check command there. For the command to mean what it means with ``--jobs 1``, that folder is a
*mirror* of the working folder ``W`` at the same path below a private root:
``W/onnx_reducer_slots/slot<i>/`` + ``W``'s absolute path (``/home/u/run`` gives
``W/onnx_reducer_slots/slot2/home/u/run``). Every folder on the way mirrors its real counterpart
(``slot2/home/u`` holds a symbolic link to each entry of ``/home/u`` but ``run``), so the check's
``..`` (``python ../tools/check.py``), ``../..`` and ``../run/...`` resolve as in ``W``: names
along the path, ``Path.cwd().name`` and the depth are ``W``'s. In the slot's ``W``:

- the iteration artifact (``polygraphy_debug.onnx``, or ``--iter-artifact``), its weight files,
  ``--iter-info`` and ``--artifacts`` are the slot's own, at the relative path the command uses
  (folders on that path mirror theirs the same way);
- regular files up to ``COPY_LIMIT_BYTES`` (1 MiB; smallest first, at most ``COPY_BUDGET_BYTES``,
  64 MiB, per slot) are *copied*, so that a check that writes a fixed-name file in its working
  folder and reads it back (``out.json``, a log) writes its slot's copy, even when an earlier run
  left that file in ``W``;
- everything else (folders, larger files, links) is a symbolic link to ``W``'s entry: reads see
  ``W``'s files, and writes into a subfolder (``tools/out.txt``) or through ``..`` reach the real
  folder, shared by the slots (as by every run of a ``--jobs 1`` reduction).

Absolute paths are untouched. Only the absolute working folder itself (``os.getcwd()``, ``$PWD``)
differs, so a ``--check`` that names the iteration artifact by its absolute path is refused
(``refuse_absolute_artifact``). The links are made when the run starts: entries added later to the
folders on the way are not seen through the mirror."""

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
COPY_LIMIT_BYTES = 2**20  # files of the working folder up to this size are copied into each slot,
COPY_BUDGET_BYTES = 64 * 2**20  # smallest first, up to this much per slot; larger ones are linked
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


Tree = dict[str, "Tree"]
"""Names a mirror keeps out of its links, by folder: ``{}`` under a name: the name itself (a file
the slot writes); a non-empty tree: a real folder that mirrors its counterpart but those names."""


def refuse_absolute_artifact(command: Sequence[str], artifact: str, working: Sequence[str]) -> None:
    """With several slots the command must name the iteration artifact as a relative path: every
    slot writes its own, and the working folder's (an earlier run's, or none) is not the one its
    check is about. ``working``: the working folder's spellings (the real path, ``$PWD``)."""
    names = {str(PurePath(folder) / artifact) for folder in working}
    for name in sorted(names):
        pattern = re.compile(re.escape(name) + r"(?![\w.-])")
        if any(pattern.search(token) for token in command):
            raise UsageError(
                f"--check names the iteration artifact by its absolute path, {name}: with --jobs above 1 every "
                f"slot writes its own, in its own folder, so name it as a relative path ({artifact}), as "
                "the check runs in that folder, or run one check at a time (--jobs 1)."
            )


class SlotFolders:
    """``onnx_reducer_slots/slot1..slotN`` under ``base`` (the working folder), each a mirror of
    ``base``'s path from the file system's root down to ``base`` (see the module's documentation),
    keeping out ``private`` (paths relative to ``base`` that the slots write themselves)."""

    def __init__(self, base: Path, count: int, private: Iterable[PurePath]) -> None:
        self.base = base.resolve()
        self.root = self.base / SLOTS_DIR
        self.count = count
        written = [path for item in private for path in (item, item.with_name(f"{item.name}.tmp"))]
        self.private = [PurePath(SLOTS_DIR), *written]

    def top(self, slot: int) -> Path:
        """Slot ``slot``'s mirror of the file system's root."""
        return self.root / f"slot{slot}"

    def folder(self, slot: int) -> Path:
        """Slot ``slot``'s working folder: the mirror of ``base``."""
        return self.top(slot) / self.base.relative_to(self.base.anchor)

    def path(self, slot: int, relative: PurePath) -> Path:
        return self.folder(slot) / relative

    def create(self) -> None:
        """Fresh slot folders (those of an earlier run are removed), each mirroring ``base``."""
        self._remove_stale()
        self.root.mkdir()
        (self.root / MARKER).write_text("Slot folders of onnx-reducer reduce --jobs; removed by its next run.\n")
        tree = _private_tree(self.base, self.private)
        copied = _copied(self.base, _subtree(tree, self.base))
        for slot in range(1, self.count + 1):
            top = self.top(slot)
            top.mkdir()
            _mirror(Path(self.base.anchor), top, tree, copied)

    def remove(self) -> None:
        """Remove the slot folders (links and copies only: never what a link points to)."""
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


def _private_tree(base: Path, private: Sequence[PurePath]) -> Tree:
    """The tree of names kept out of the links: the path from the root down to ``base``, then the
    ``private`` paths below it."""
    below: Tree = {}
    for path in private:
        node = below
        for name in path.parts[:-1]:
            node = node.setdefault(name, {})
        node[path.parts[-1]] = node.get(path.parts[-1], {})
    tree: Tree = below
    for name in reversed(base.relative_to(base.anchor).parts):
        tree = {name: tree}
    return tree


def _subtree(tree: Tree, base: Path) -> Tree:
    for name in base.relative_to(base.anchor).parts:
        tree = tree[name]
    return tree


def _copied(base: Path, tree: Tree) -> set[Path]:
    """The files of ``base`` (and of the kept-out folders below it) each slot gets a copy of:
    regular files up to ``COPY_LIMIT_BYTES``, smallest first, up to ``COPY_BUDGET_BYTES``."""
    sizes = sorted(_small_files(base, tree), key=lambda item: (item[1], item[0]))
    copied: set[Path] = set()
    spent = 0
    for path, size in sizes:
        if spent + size > COPY_BUDGET_BYTES:
            break
        copied.add(path)
        spent += size
    return copied


def _small_files(real: Path, tree: Tree) -> list[tuple[Path, int]]:
    found: list[tuple[Path, int]] = []
    for entry in _entries(real):
        if entry.name in tree:
            if tree[entry.name] and entry.is_dir():
                found += _small_files(entry, tree[entry.name])
            continue
        try:
            if not entry.is_symlink() and entry.is_file() and entry.stat().st_size <= COPY_LIMIT_BYTES:
                found.append((entry, entry.stat().st_size))
        except OSError:
            continue
    return found


def _mirror(real: Path, into: Path, tree: Tree, copied: set[Path]) -> None:
    """Fill the folder ``into`` with ``real``'s entries but those ``tree`` keeps out: a copy of
    the ``copied`` files, a symbolic link to the others. A folder on a kept-out path is a real
    folder, mirrored in turn."""
    for entry in _entries(real):
        if entry.name in tree:
            continue
        if entry in copied:
            shutil.copy2(entry, into / entry.name)
        else:
            (into / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    for name, below in tree.items():
        if below:  # a folder on a kept-out path (an empty tree: a file the slot writes itself)
            (into / name).mkdir(exist_ok=True)
            if (real / name).is_dir():
                _mirror(real / name, into / name, below, copied)


def _entries(folder: Path) -> list[Path]:
    """``folder``'s entries; none when it cannot be listed (a folder one may pass but not read)."""
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []

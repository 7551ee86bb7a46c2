"""Before the first check of ``reduce``/``precision``: every place the run will write must be
writable, so a read-only working folder or ``-o`` into a read-only folder is one line at the start,
not a traceback after the whole reduction (and no replay file left behind)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from reducer_core.errors import UsageError

# (option, attribute of the namespace): the files a run writes; the working folder is the
# --iter-artifact's folder (the check's model, scratch files and, by default, the replay).
_OUTPUTS = (
    ("-o/--output", "output"),
    ("--min-good", "min_good"),
    ("--summary-json", "summary_json"),
    ("--save-debug-replay", "save_debug_replay"),
    ("--iter-info", "iteration_info"),
    ("--log-file", "log_file"),
)


def _existing_folder(path: Path) -> Path:
    """The folder ``path`` would be created in: its nearest existing ancestor (parents are created)."""
    folder = path.parent if path.name else path
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _cannot_write(folder: Path) -> str | None:
    """Why no file can be created in ``folder`` (a real attempt: permissions, a read-only mount, a
    full disk), or None."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".onnx-reducer-probe-"):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def check_writable(ns: argparse.Namespace) -> None:
    """Raise UsageError (one line, exit 2) naming the first place this run could not write."""
    iter_artifact = getattr(ns, "iter_artifact", None)
    if iter_artifact:
        work_dir = _existing_folder(Path(iter_artifact).absolute())
        why = _cannot_write(work_dir)
        if why is not None:
            raise UsageError(
                f"Cannot write in the working folder '{work_dir}' ({why}): the model each check reads "
                "(--iter-artifact) and the replay are written there. Run from a writable folder, or point "
                "--iter-artifact and --save-debug-replay at one."
            )
    for option, attribute in _OUTPUTS:
        value = getattr(ns, attribute, None)
        if not value:
            continue
        path = Path(value)
        if path.is_dir():
            raise UsageError(f"{option} '{value}' is a folder; give a file name in it.")
        folder = _existing_folder(path.absolute())
        why = _cannot_write(folder)
        if why is not None:
            raise UsageError(f"Cannot write {option} '{value}': the folder '{folder}' is not writable ({why}).")

"""Reference outputs reused between the checks of one process's runners (issue 31).

A compare check runs the candidate on its reference runtime and on its target. When the same
candidate is checked again with the same inputs (``repeat: N``, a flaky original's re-checks, a
candidate judged once more), the reference run would give the same values: the first run stores
them here, and the next runs read them instead of building a reference session again. The target
always runs.

The key is everything the values depend on: the reference runtime's spec, the candidate model
itself (serialized with its weights, so the same graph with other weights is another key), and
every input's name, type, shape and bytes; the onnxruntime version is that of the runner's
interpreter, the same for every check of one process. Values are stored as ``.npy`` entries of a
zip (no pickles)
written to a temporary name and renamed, so a check killed while writing leaves nothing half
written. Models above ``MAX_MODEL_BYTES`` and outputs above ``MAX_VALUES_BYTES`` are not cached; at
most ``MAX_ENTRIES`` files of at most ``MAX_TOTAL_BYTES`` together are kept (the oldest go first).

The folder comes in the check's payload (``reference_cache``); ``checks.isolated`` gives one folder
per process, removed when the process exits."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import onnx

from checks.spec import RuntimeSpec

MAX_MODEL_BYTES = 256 * 2**20
MAX_VALUES_BYTES = 64 * 2**20
MAX_ENTRIES = 64
MAX_TOTAL_BYTES = 512 * 2**20  # all entries of one folder together (a folder per process, in the temp folder)
NAMES = "names.json"

Values = Mapping[str, np.ndarray]


def cache_key(runtime: RuntimeSpec, model: onnx.ModelProto, feeds: Values) -> str | None:
    """The sha256 naming these reference values; None where the model is too large to hash."""
    if model.ByteSize() > MAX_MODEL_BYTES:
        return None
    digest = hashlib.sha256(repr(runtime).encode())  # every field of the runtime's spec
    digest.update(model.SerializeToString(deterministic=True))
    for name in sorted(feeds):
        value = np.ascontiguousarray(feeds[name])
        digest.update(json.dumps([name, value.dtype.str, list(value.shape)]).encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def load(folder: Path, key: str) -> dict[str, np.ndarray] | None:
    """The values stored under ``key``, None when there are none (or they cannot be read)."""
    try:
        with zipfile.ZipFile(folder / f"{key}.npz") as archive:
            names = json.loads(archive.read(NAMES))
            found: dict[str, np.ndarray] = {}
            for i, name in enumerate(names):
                with archive.open(f"{i}.npy") as entry:
                    found[str(name)] = np.lib.format.read_array(entry, allow_pickle=False)
            return found
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None


def store(folder: Path, key: str, values: Values) -> None:
    """Store ``values`` under ``key`` (tensor names of any spelling; no object arrays)."""
    if sum(np.asarray(v).nbytes for v in values.values()) > MAX_VALUES_BYTES:
        return
    handle, temporary = tempfile.mkstemp(dir=folder, suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out, zipfile.ZipFile(out, "w") as archive:
            for i, value in enumerate(values.values()):
                with archive.open(f"{i}.npy", "w") as entry:
                    np.lib.format.write_array(entry, np.asarray(value), allow_pickle=False)
            archive.writestr(NAMES, json.dumps(list(values)))
        os.replace(temporary, folder / f"{key}.npz")
    except (OSError, ValueError):  # a full disk, an object array: not cached
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return
    _keep_newest(folder)


def _keep_newest(folder: Path) -> None:
    """Keep the newest ``MAX_ENTRIES`` that fit in ``MAX_TOTAL_BYTES`` together, remove the rest;
    checks at once (``--jobs N``) may remove the same entries, so one gone between the listing and
    its ``stat`` is skipped."""
    entries: list[tuple[int, int, Path]] = []
    for path in folder.glob("*.npz"):
        with contextlib.suppress(OSError):
            status = path.stat()
            entries.append((status.st_mtime_ns, status.st_size, path))
    entries.sort(reverse=True)
    kept_bytes = 0
    for index, (_, size, path) in enumerate(entries):
        kept_bytes += size
        if index >= MAX_ENTRIES or kept_bytes > MAX_TOTAL_BYTES:
            with contextlib.suppress(OSError):
                path.unlink()


def reference_values(
    folder: str | None, runtime: RuntimeSpec, model: onnx.ModelProto, feeds: Values, run: Callable[[], Values]
) -> Values:
    """``run()``'s values, read from ``folder`` when a check stored them for the same key; without
    a folder (cold checks, reuse off) ``run()`` itself."""
    if not folder or not Path(folder).is_dir():
        return run()
    key = cache_key(runtime, model, feeds)
    if key is None:
        return run()
    found = load(Path(folder), key)
    if found is not None and _has_outputs(found, model):
        return found
    values = run()
    store(Path(folder), key, values)
    return values


def _has_outputs(values: Values, model: onnx.ModelProto) -> bool:
    return all(output.name in values for output in model.graph.output)

"""A finished service job's bug-report bundle (``engine.bundle``), built by the worker that
finished the job and stored as the job's ``bundle`` artifact (in any store with ``put_file``).

Built at the job's end rather than on each download: its ``environment.json`` must name the
worker's runtimes, providers and GPU (the API process has none of them), and building it runs the
bundle's ``repro.py`` on the models (model code belongs on workers, never in the API). A download
then serves a stored file. A bundle that cannot be built never fails the job: the job has no
``bundle`` artifact and the download says why."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from checks.isolated import safe_child_env
from checks.spec import CheckSpec
from engine.bundle import BundleCheck, write_bundle
from engine.workspace import Workspace
from reducer_core.records import ReductionResult

log = logging.getLogger(__name__)

Blob_co = TypeVar("Blob_co", covariant=True)
B = TypeVar("B")


class FileStore(Protocol[Blob_co]):
    """Where the bundle is kept (the service's ``persistence.store.ArtifactStore``)."""

    def put_file(self, path: Path) -> Blob_co: ...


def store_bundle(
    store: FileStore[B],
    workspace: Workspace,
    result: ReductionResult,
    spec: CheckSpec,
    golden: Path | None,
    work_dir: Path,
    original_name: str,
    worker: str,
    verified: Mapping[str, bool] | None = None,
) -> tuple[B, dict[str, Any]] | None:
    """The stored bundle and its meta (``finding``, ``reproduced``, ``members``, ``checks_run``:
    the checks its self-check ran, ``reused``: the models whose verdict the final verification
    gave, ``verified``: sha256 -> agreed, ``engine.bundle``); None when it could not be built (logged)."""
    folder = work_dir / "result-bundle"
    shutil.rmtree(folder, ignore_errors=True)
    check = dataclasses.replace(BundleCheck.of_spec(spec, golden, cwd=work_dir), env=safe_child_env())
    try:
        report = write_bundle(
            folder / "bundle.zip", workspace, result, check, workspace.options.model, worker, original_name, verified
        )
        blob = store.put_file(report.path)
    except Exception:  # the job's result stands without its bundle
        log.exception("could not build the bug-report bundle")
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    meta: dict[str, Any] = {"finding": report.finding, "reproduced": report.reproduced, "members": report.members}
    meta |= {"checks_run": report.checks_run, "reused": report.reused}
    return blob, meta
